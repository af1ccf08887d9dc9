"""Admission: pending input bytes, empty commits, oversize commands.

Client command numbering has its own file, ``test_client_seq.py``.
"""

from __future__ import annotations

import pytest

from omni_grpc.core import Limits
from omni_grpc.wire import pb

from .helpers import VAD_ENGINE, append, cmd, decode, open_session, text

# -- pending input ----------------------------------------------------------------------


def backpressure(client_seq: int) -> pb.ErrorReport:
    return pb.ErrorReport(
        code="input_backpressure",
        type=pb.ERROR_TYPE_RATE_LIMIT,
        message="too much uncommitted input; commit or clear first",
        client_seq=client_seq,
        retryable=True,
    )


def test_pending_input_beyond_the_cap_is_refused_retryably() -> None:
    s = open_session(limits=Limits(max_pending_input_bytes=8)).session
    assert s.receive(1, append(1, b"\0" * 4), now=0.0).engine == [append(1, b"\0" * 4)]
    assert s.receive(1, append(2, b"\0" * 4), now=0.0).engine == [append(2, b"\0" * 4)]
    refused = s.receive(1, append(3, b"\0" * 2), now=0.0)
    assert refused.engine == []
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
    s = open_session(limits=Limits(max_pending_input_bytes=4)).session
    s.receive(1, append(1, b"\0" * 4), now=0.0)
    assert s.receive(1, drain, now=0.0).engine == [drain]
    assert s.admission.pending_input_bytes == 0
    assert s.receive(1, append(3, b"\0" * 4), now=0.0).engine == [append(3, b"\0" * 4)]


@pytest.mark.parametrize(
    ("kind", "frees"),
    [("input_committed", True), ("input_cleared", True), ("speech_stopped", False)],
)
def test_engine_events_that_free_the_budget(kind: str, frees: bool) -> None:
    s = open_session().session
    s.receive(1, append(1, b"\0" * 6), now=0.0)
    s.publish(pb.ConverseResponse(**{kind: getattr(pb, _message_of(kind))()}), now=0.0)
    assert s.admission.pending_input_bytes == (0 if frees else 6)


def _message_of(kind: str) -> str:
    return "".join(part.title() for part in kind.split("_"))


def test_video_frames_count_toward_the_cap() -> None:
    s = open_session(limits=Limits(max_pending_input_bytes=10)).session
    frame = pb.VideoFrame(data=b"\xff" * 8, mime_type="image/jpeg")
    assert s.receive(1, append(1, b"\0\0", video_frames=[frame]), now=0.0).engine
    assert s.admission.pending_input_bytes == 10
    assert decode(s.receive(1, append(2), now=0.0))[0].error == backpressure(2)


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
    assert s.receive(1, append(1, b"\0" * 8), now=0.0).engine  # the engine bounds it
    assert s.admission.pending_input_bytes == 0
    commit = cmd(2, commit_input_audio=pb.CommitInputAudio())
    assert s.receive(1, commit, now=0.0).engine == [commit]


# -- oversize ---------------------------------------------------------------------------


def test_an_oversize_command_is_refused_and_the_session_goes_on() -> None:
    s = open_session(limits=Limits(max_message_bytes=64)).session
    big = text(1, "x" * 100, event_id="ev-big")
    assert big.ByteSize() > 64
    refused = s.receive(1, big, now=0.0)
    assert refused.engine == []
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
    assert s.receive(1, text(2, "small"), now=0.0).engine == [text(2, "small")]
