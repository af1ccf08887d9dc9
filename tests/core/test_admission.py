"""Admission and input bounds: session slots, pending input bytes, oversize commands."""

from __future__ import annotations

import re

import pytest

from omni_grpc.core import Limits, Registry, Status, StreamRefused
from omni_grpc.core.errors import CommandError, error_type
from omni_grpc.wire import pb

from .helpers import ENGINE, VAD_ENGINE, append, cmd, decode, open_session, text


def test_open_beyond_max_sessions_is_refused_retryably() -> None:
    registry = Registry(Limits(max_sessions=2, open_retry_after_s=1.5), ENGINE)
    first, _ = registry.open(pb.OpenSession(), now=0.0)
    registry.open(pb.OpenSession(), now=0.0)
    with pytest.raises(StreamRefused) as refused:
        registry.open(pb.OpenSession(), now=0.0)
    error = refused.value
    assert (error.status, error.code, error.retryable, error.retry_after_s) == (
        Status.RESOURCE_EXHAUSTED,
        "resource_exhausted",
        True,
        1.5,
    )
    expected = pb.Error(
        code="resource_exhausted",
        type=pb.ERROR_TYPE_RATE_LIMIT,
        message="session capacity exhausted: limit=2",
        retryable=True,
    )
    expected.retry_after.FromMilliseconds(1500)
    assert error.to_error() == expected
    assert len(registry) == 2
    registry.discard(first)  # a slot frees when its session ends
    assert len(registry) == 1
    registry.open(pb.OpenSession(), now=0.0)


def test_expiry_frees_the_slot() -> None:
    registry = Registry(Limits(max_sessions=1), ENGINE)
    session, _ = registry.open(pb.OpenSession(), now=0.0)
    session.detach(1, now=0.0)
    assert [s for s, _ in registry.tick(Limits().disconnect_grace_s)] == [session]
    registry.open(pb.OpenSession(), now=40.0)


def test_discarding_a_stale_object_frees_nothing() -> None:
    registry = Registry(Limits(), ENGINE)
    session, _ = registry.open(pb.OpenSession(), now=0.0)
    registry.discard(session)
    registry.discard(session)
    assert len(registry) == 0


def test_a_draining_server_refuses_opens() -> None:
    registry = Registry(Limits(open_retry_after_s=2.0), ENGINE)
    registry.accepting = False
    with pytest.raises(StreamRefused) as refused:
        registry.open(pb.OpenSession(), now=0.0)
    assert (
        refused.value.status,
        refused.value.code,
        refused.value.retryable,
        refused.value.retry_after_s,
    ) == (Status.UNAVAILABLE, "server_shutting_down", True, 2.0)


def test_a_bad_config_refuses_the_stream_with_its_code() -> None:
    registry = Registry(Limits(), ENGINE)
    with pytest.raises(StreamRefused) as refused:
        registry.open(pb.OpenSession(config=pb.SessionConfig(temperature=3.0)), now=0.0)
    assert (refused.value.status, refused.value.code, refused.value.message) == (
        Status.INVALID_ARGUMENT,
        "invalid_session_config",
        "temperature must be in [0, 2]",
    )
    assert len(registry) == 0


def test_session_ids_are_unique_and_unguessable() -> None:
    registry = Registry(Limits(max_sessions=100), ENGINE)
    ids = {registry.open(pb.OpenSession(), now=0.0)[0].id for _ in range(100)}
    assert len(ids) == 100
    assert all(re.fullmatch(r"sess_[0-9a-f]{32}", session_id) for session_id in ids)


def test_registry_iterates_a_snapshot_and_reports_the_earliest_deadline() -> None:
    registry = Registry(Limits(), ENGINE)
    assert registry.next_deadline() is None
    a, _ = registry.open(pb.OpenSession(), now=10.0)
    b, _ = registry.open(pb.OpenSession(), now=0.0)
    b.publish(
        pb.ConverseResponse(response_created=pb.ResponseCreated(response=pb.Response(id="r"))),
        now=0.0,
    )  # no deadline while responding
    assert registry.next_deadline() == 10.0 + Limits().idle_timeout_s
    for session in registry:
        registry.discard(session)  # safe while iterating
    assert len(registry) == 0 and a.id != b.id


# -- pending input ----------------------------------------------------------------------


def backpressure(client_seq: int) -> pb.Error:
    return pb.Error(
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
    assert refused[0].error == pb.Error(
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
            error=pb.Error(
                code="event_too_large",
                type=pb.ERROR_TYPE_INVALID_REQUEST,
                message="a command may have at most 64 bytes",
                client_seq=1,
                event_id="ev-big",
            ),
        )
    ]
    assert s.receive(1, text(2, "small"), now=0.0).engine == [text(2, "small")]


# -- error classification ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("resource_exhausted", pb.ERROR_TYPE_RATE_LIMIT),
        ("input_backpressure", pb.ERROR_TYPE_RATE_LIMIT),
        ("output_backpressure", pb.ERROR_TYPE_RATE_LIMIT),
        ("internal_error", pb.ERROR_TYPE_SERVER),
        ("engine_error", pb.ERROR_TYPE_SERVER),
        ("engine_failed", pb.ERROR_TYPE_SERVER),
        ("bad_event", pb.ERROR_TYPE_INVALID_REQUEST),
        ("client_seq_gap", pb.ERROR_TYPE_INVALID_REQUEST),
    ],
)
def test_error_type(code: str, expected: int) -> None:
    assert error_type(code) == expected


def test_command_error_renders_without_a_retry_hint_unless_given() -> None:
    error = CommandError("bad_event", "nope", param="audio")
    assert str(error) == "bad_event: nope"
    assert not error.to_error().HasField("retry_after")
