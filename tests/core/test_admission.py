"""Admission: pending input bytes, empty commits, oversize commands.

Client command numbering has its own file, ``test_client_seq.py``.
"""

from __future__ import annotations

import dataclasses

import pytest

from omni_grpc.core import Limits
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT

from .helpers import (
    ENGINE,
    VAD_ENGINE,
    append,
    close,
    cmd,
    decode,
    handed,
    open_session,
    requests,
    text,
)

# -- pending input ----------------------------------------------------------------------

# Input in the canonical form: the pending bytes are the appended bytes, one for one.
CANONICAL = pb.SessionConfig(input_audio_format=CANONICAL_INPUT)


def backpressure(client_seq: int) -> pb.ErrorReport:
    return pb.ErrorReport(
        code="input_backpressure",
        type=pb.ERROR_TYPE_RATE_LIMIT,
        message="too much uncommitted input; commit or clear first",
        client_seq=client_seq,
        retryable=True,
    )


def test_pending_input_beyond_the_cap_is_refused_retryably() -> None:
    s = open_session(limits=Limits(max_pending_input_bytes=8), config=CANONICAL).session
    assert requests(s.receive(1, append(1, b"\0" * 4), now=0.0)) == [handed(append(1, b"\0" * 4))]
    assert requests(s.receive(1, append(2, b"\0" * 4), now=0.0)) == [handed(append(2, b"\0" * 4))]
    refused = s.receive(1, append(3, b"\0" * 2), now=0.0)
    assert requests(refused) == []
    assert decode(refused) == [
        pb.ConverseResponse(seq=1, applied_client_seq=3, error=backpressure(3))
    ]
    assert s.admission.pending_input_bytes == 8


@pytest.mark.parametrize(
    "drain",
    [
        cmd(2, commit_input_audio=pb.CommitInputAudio()),
        cmd(2, clear_input_audio=pb.ClearInputAudio()),
        cmd(2, cancel_input=pb.CancelInput()),
    ],
    ids=lambda request: request.WhichOneof("command"),
)
def test_commit_clear_and_cancel_free_the_budget(drain: pb.ConverseRequest) -> None:
    s = open_session(limits=Limits(max_pending_input_bytes=4), config=CANONICAL).session
    s.receive(1, append(1, b"\0" * 4), now=0.0)
    assert requests(s.receive(1, drain, now=0.0)) == [handed(drain)]
    assert s.admission.pending_input_bytes == 0
    assert requests(s.receive(1, append(3, b"\0" * 4), now=0.0)) == [handed(append(3, b"\0" * 4))]


@pytest.mark.parametrize(
    ("kind", "frees"),
    [("input_committed", True), ("input_cleared", True), ("speech_stopped", False)],
)
def test_engine_events_that_free_the_budget(kind: str, frees: bool) -> None:
    s = open_session(config=CANONICAL).session
    s.receive(1, append(1, b"\0" * 6), now=0.0)
    s.publish(pb.ConverseResponse(**{kind: getattr(pb, _message_of(kind))()}), now=0.0)
    assert s.admission.pending_input_bytes == (0 if frees else 6)


def _message_of(kind: str) -> str:
    return "".join(part.title() for part in kind.split("_"))


def test_video_frames_count_toward_the_cap() -> None:
    s = open_session(limits=Limits(max_pending_input_bytes=10), config=CANONICAL).session
    frame = pb.VideoFrame(data=b"\xff" * 8, mime_type="image/jpeg")
    assert requests(s.receive(1, append(1, b"\0\0", video_frames=[frame]), now=0.0))
    assert s.admission.pending_input_bytes == 10
    assert decode(s.receive(1, append(2), now=0.0))[0].error == backpressure(2)


@pytest.mark.parametrize(
    ("encoding", "rate_hz", "wire", "held"),
    [
        (pb.AUDIO_ENCODING_PCM16, 24000, 6, 4),  # 3 samples at 24 kHz: 2 at 16 kHz
        (pb.AUDIO_ENCODING_G711_ULAW, 8000, 4, 16),  # 4 samples at 8 kHz: 8 of pcm16
        (pb.AUDIO_ENCODING_PCM_F32, 48000, 12, 2),  # 3 samples at 48 kHz: 1 at 16 kHz
    ],
)
def test_pending_input_counts_the_bytes_the_engine_keeps(
    encoding: pb.AudioEncoding.ValueType, rate_hz: int, wire: int, held: int
) -> None:
    fmt = pb.AudioFormat(encoding=encoding, sample_rate_hz=rate_hz)
    opened = open_session(config=pb.SessionConfig(input_audio_format=fmt))
    [admitted] = opened.session.receive(1, append(1, b"\0" * wire), now=0.0).engine
    assert not admitted.native  # the edge converts it
    assert opened.session.admission.pending_input_bytes == held
    assert opened.registry.budget.held == held


def test_input_an_engine_takes_natively_counts_as_it_came() -> None:
    native = dataclasses.replace(ENGINE, native_input_rates_hz=(16000, 24000))
    opened = open_session(engine=native)  # pcm16 at 24 kHz by default
    [admitted] = opened.session.receive(1, append(1, b"\0" * 6), now=0.0).engine
    assert admitted.native and admitted.audio == b"\0" * 6
    assert opened.session.admission.pending_input_bytes == 6


def test_the_server_budget_refuses_with_a_retry_hint_and_an_ending_gives_back() -> None:
    limits = Limits(max_pending_input_bytes=8, memory_budget_bytes=10)
    first = open_session(limits=limits, config=CANONICAL)
    second = first.registry.open(pb.OpenSession(config=CANONICAL), 0.0)[0]
    assert requests(first.session.receive(1, append(1, b"\0" * 8), now=0.0))
    refused = decode(second.receive(1, append(1, b"\0" * 4), now=0.0))[0].error
    assert (refused.code, refused.retryable) == ("input_backpressure", True)
    assert refused.retry_after.ToMilliseconds() == 1000
    assert (second.admission.pending_input_bytes, first.registry.budget.held) == (0, 8)
    first.session.receive(1, close(2), now=0.0)  # the ended session's input goes back
    assert first.registry.budget.held == 0
    assert requests(second.receive(1, append(2, b"\0" * 4), now=0.0))


def test_commit_of_an_empty_buffer_is_refused() -> None:
    s = open_session().session
    refused = decode(s.receive(1, cmd(1, commit_input_audio=pb.CommitInputAudio()), now=0.0))
    assert refused[0].error == pb.ErrorReport(
        code="input_audio_buffer_empty",
        type=pb.ERROR_TYPE_INVALID_REQUEST,
        message="there is no input audio to commit",
        client_seq=1,
    )


def test_with_server_vad_the_engine_owns_the_buffer() -> None:
    s = open_session(engine=VAD_ENGINE, limits=Limits(max_pending_input_bytes=2)).session
    assert s.config.turn_detection.type == pb.TURN_DETECTION_TYPE_SERVER_VAD
    assert requests(s.receive(1, append(1, b"\0" * 8), now=0.0))  # the engine bounds it
    assert s.admission.pending_input_bytes == 0
    commit = cmd(2, commit_input_audio=pb.CommitInputAudio())
    assert requests(s.receive(1, commit, now=0.0)) == [handed(commit)]


# -- oversize ---------------------------------------------------------------------------


def test_an_oversize_command_is_refused_and_the_session_goes_on() -> None:
    s = open_session(limits=Limits(max_message_bytes=64)).session
    big = text(1, "x" * 100, event_id="ev-big")
    assert big.ByteSize() > 64
    refused = s.receive(1, big, now=0.0)
    assert requests(refused) == []
    assert decode(refused) == [
        pb.ConverseResponse(
            seq=1,
            applied_client_seq=1,
            error=pb.ErrorReport(
                code="event_too_large",
                type=pb.ERROR_TYPE_INVALID_REQUEST,
                message="a command may have at most 64 bytes",
                client_seq=1,
                event_id="ev-big",
            ),
        )
    ]
    assert requests(s.receive(1, text(2, "small"), now=0.0)) == [handed(text(2, "small"))]
