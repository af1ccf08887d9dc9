"""Stateless command checks: each bad command gets the reference's code and the right param."""

from __future__ import annotations

from typing import Any

import pytest

from omni_grpc.core import CommandError, EngineFeatures, Limits
from omni_grpc.core.config import resolve_config
from omni_grpc.core.validation import check_append, check_command
from omni_grpc.wire import pb

from .helpers import ENGINE, append, cmd, decode, handed, open_session, requests

LIMITS = Limits()
CONFIG = resolve_config(pb.SessionConfig(), LIMITS, ENGINE)  # PCM16 at 24 kHz
PCM16_ONLY = EngineFeatures(name="pcm16-only", input_encodings=(pb.AUDIO_ENCODING_PCM16,))
NO_BARGE_IN = EngineFeatures(name="no-barge-in", supports_barge_in=False)
JPEG = pb.VideoFrame(data=b"\xff\xd8", mime_type="image/jpeg")
PNG = pb.VideoFrame(data=b"\x89PNG", mime_type="image/png")


def audio(data: bytes = b"", **fields: Any) -> pb.AppendInputAudio:
    return pb.AppendInputAudio(audio=data, **fields)


BAD_APPENDS: list[tuple[pb.AppendInputAudio, EngineFeatures, str, str]] = [
    (audio(), ENGINE, "bad_event", "audio"),
    (
        audio(b"\0", encoding=pb.AUDIO_ENCODING_G711_ULAW),
        PCM16_ONLY,
        "unsupported_audio_format",
        "encoding",
    ),
    (audio(b"\0\0", sample_rate_hz=11025), ENGINE, "unsupported_audio_format", "sample_rate_hz"),
    (audio(b"\0\0\0"), ENGINE, "bad_audio", "audio"),  # PCM16: 2 bytes a sample
    (audio(b"\0" * 6, encoding=pb.AUDIO_ENCODING_PCM_F32), ENGINE, "bad_audio", "audio"),
    (
        audio(b"\0\0", video_frames=[JPEG, PNG, JPEG]),
        ENGINE,
        "invalid_video_frames",
        "video_frames",
    ),
    (
        audio(video_frames=[pb.VideoFrame(data=b"GIF8", mime_type="image/gif")]),
        ENGINE,
        "invalid_video_frames",
        "video_frames",
    ),
    (
        audio(video_frames=[pb.VideoFrame(mime_type="image/png")]),
        ENGINE,
        "invalid_video_frames",
        "video_frames",
    ),
]


@pytest.mark.parametrize(("append_", "engine", "code", "param"), BAD_APPENDS)
def test_bad_appends(
    append_: pb.AppendInputAudio, engine: EngineFeatures, code: str, param: str
) -> None:
    with pytest.raises(CommandError) as refused:
        check_append(append_, append_.audio, CONFIG, LIMITS, engine)
    assert (refused.value.code, refused.value.param) == (code, param)


@pytest.mark.parametrize(
    "append_",
    [
        audio(b"\0\0"),
        audio(b"\0", encoding=pb.AUDIO_ENCODING_G711_ULAW, sample_rate_hz=8000),
        audio(b"\0" * 8, encoding=pb.AUDIO_ENCODING_PCM_F32),
        audio(video_frames=[JPEG]),  # a frame alone is input too
        audio(b"\0\0", video_frames=[JPEG, PNG]),
    ],
    ids=["pcm16", "ulaw", "f32", "frame-only", "two-frames"],
)
def test_good_appends(append_: pb.AppendInputAudio) -> None:
    check_append(append_, append_.audio, CONFIG, LIMITS, ENGINE)


AUDIO_ITEMS = EngineFeatures(
    name="audio-items", default_model="test-model", supports_input_audio_items=True
)
AUDIO_PART = pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_AUDIO, audio=b"\0\0" * 160)


def audio_item(
    *parts: pb.ContentPart, role: pb.ItemRole.ValueType = pb.ITEM_ROLE_USER
) -> pb.ConverseRequest:
    item = pb.ConversationItem(role=role, content=parts)
    return cmd(1, create_conversation_item=pb.CreateConversationItem(item=item))


BAD_COMMANDS: list[tuple[pb.ConverseRequest, EngineFeatures, str, str]] = [
    (
        cmd(1, append_input_text=pb.AppendInputText(text="x" * (LIMITS.max_text_chars + 1))),
        ENGINE,
        "bad_event",
        "text",
    ),
    (cmd(1, barge_in=pb.BargeIn()), NO_BARGE_IN, "barge_in_unsupported", ""),
    (
        cmd(1, retrieve_conversation_item=pb.RetrieveConversationItem()),
        ENGINE,
        "missing_item_id",
        "item_id",
    ),
    (
        cmd(1, delete_conversation_item=pb.DeleteConversationItem()),
        ENGINE,
        "missing_item_id",
        "item_id",
    ),
    (
        cmd(1, truncate_conversation_item=pb.TruncateConversationItem(audio_end_ms=5)),
        ENGINE,
        "missing_item_id",
        "item_id",
    ),
    (
        cmd(
            1, truncate_conversation_item=pb.TruncateConversationItem(item_id="i", audio_end_ms=-1)
        ),
        ENGINE,
        "bad_event",
        "audio_end_ms",
    ),
    (cmd(1, ack_playback=pb.AckPlayback(played_ms=-1)), ENGINE, "bad_event", "played_ms"),
    (
        cmd(1, ack_playback=pb.AckPlayback(played_ms=5, committed_ms=-1)),
        ENGINE,
        "bad_event",
        "played_ms",
    ),
    (cmd(1, create_conversation_item=pb.CreateConversationItem()), ENGINE, "bad_event", "item"),
    # Audio in an item: only where the engine takes it, a user's only input_audio part, bounded.
    (audio_item(AUDIO_PART), ENGINE, "unsupported_content", "item.content.0.audio"),
    (
        audio_item(AUDIO_PART, role=pb.ITEM_ROLE_ASSISTANT),
        AUDIO_ITEMS,
        "bad_event",
        "item.content.0.audio",
    ),
    (
        audio_item(pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, audio=b"\0\0")),
        AUDIO_ITEMS,
        "bad_event",
        "item.content.0.audio",
    ),
    (
        audio_item(pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text="hi"), AUDIO_PART),
        AUDIO_ITEMS,
        "bad_event",
        "item.content.1.audio",
    ),
    (
        audio_item(
            pb.ContentPart(
                type=pb.CONTENT_TYPE_INPUT_AUDIO, audio=b"\0" * (LIMITS.max_pending_input_bytes + 2)
            )
        ),
        AUDIO_ITEMS,
        "bad_event",
        "item.content.0.audio",
    ),
]


@pytest.mark.parametrize(("request_", "engine", "code", "param"), BAD_COMMANDS)
def test_bad_commands(
    request_: pb.ConverseRequest, engine: EngineFeatures, code: str, param: str
) -> None:
    kind = request_.WhichOneof("command")
    assert kind is not None
    with pytest.raises(CommandError) as refused:
        check_command(request_, kind, LIMITS, engine)
    assert (refused.value.code, refused.value.param) == (code, param)


@pytest.mark.parametrize(
    "request_",
    [
        cmd(1, append_input_text=pb.AppendInputText(text="x" * LIMITS.max_text_chars)),
        cmd(1, barge_in=pb.BargeIn()),
        cmd(1, retrieve_conversation_item=pb.RetrieveConversationItem(item_id="i")),
        cmd(1, delete_conversation_item=pb.DeleteConversationItem(item_id="i")),
        cmd(1, truncate_conversation_item=pb.TruncateConversationItem(item_id="i")),
        cmd(1, ack_playback=pb.AckPlayback(played_ms=0, committed_ms=0)),
        cmd(1, create_conversation_item=pb.CreateConversationItem(item=pb.ConversationItem())),
        cmd(1, create_response=pb.CreateResponse()),
    ],
    ids=lambda request_: request_.WhichOneof("command"),
)
def test_good_commands(request_: pb.ConverseRequest) -> None:
    kind = request_.WhichOneof("command")
    assert kind is not None
    check_command(request_, kind, LIMITS, ENGINE)


def test_a_users_audio_item_passes_where_the_engine_takes_it() -> None:
    request_ = audio_item(AUDIO_PART)
    check_command(request_, "create_conversation_item", LIMITS, AUDIO_ITEMS)


def test_the_session_refuses_through_an_error_event_and_forwards_nothing() -> None:
    s = open_session().session
    effects = s.receive(
        1,
        cmd(
            1,
            "ev-t",
            truncate_conversation_item=pb.TruncateConversationItem(item_id="i", audio_end_ms=-5),
        ),
        now=0.0,
    )
    assert requests(effects) == []
    assert decode(effects) == [
        pb.ConverseResponse(
            seq=1,
            applied_client_seq=1,
            error=pb.ErrorReport(
                code="bad_event",
                type=pb.ERROR_TYPE_INVALID_REQUEST,
                message="audio_end_ms must not be negative",
                param="audio_end_ms",
                client_seq=1,
                event_id="ev-t",
            ),
        )
    ]
    refused = decode(s.receive(1, append(2, b"\0"), now=0.0))
    assert refused[0].error.code == "bad_audio"
    assert s.admission.pending_input_bytes == 0  # a refused append reserves nothing


def test_append_uses_its_own_format_over_the_session_one() -> None:
    s = open_session().session
    ulaw = append(1, b"\0", encoding=pb.AUDIO_ENCODING_G711_ULAW, sample_rate_hz=8000)
    assert requests(s.receive(1, ulaw, now=0.0)) == [handed(ulaw)]
    # One G.711 sample at 8 kHz: two pcm16 samples of canonical input at 16 kHz.
    assert s.admission.pending_input_bytes == 4
