"""Ended sessions stay resumable for one grace (tombstones), and unparsable input is refused.

A client whose stream broke just as its session ended would otherwise never learn how it
ended; these tests pin down that it can still read the ending, only the ending's owner can, and
only for a bounded time and number of sessions.
"""

from __future__ import annotations

import pytest

from omni_grpc.core import CommandError, Limits, StreamRefused
from omni_grpc.core.errors import Status
from omni_grpc.wire import pb

from .helpers import ENGINE, close, decode, heartbeat, kinds, open_session, resume, transcript


def test_a_missed_ending_is_replayed_and_the_stream_ends() -> None:
    opened = open_session()
    s, registry = opened.session, opened.registry
    s.publish(transcript("a"), now=1.0)  # seq 1
    ended = s.close("client_close", now=2.0)  # seq 2
    registry.discard(s)
    assert ended.ended and len(registry) == 0  # the slot is free at once
    found, generation, effects = registry.resume(
        pb.ResumeSession(session_id=s.id, resume_token=opened.token, last_received_seq=1), 3.0
    )
    assert found is s and generation == 2
    events = decode(effects, generation)
    assert kinds(events) == ["session_resumed", "session_closed"]
    assert events[0].session_resumed.replayed_events == 1
    assert events[0].session_resumed.resume_token == ""  # nothing left to resume into
    assert events[1].seq == 2 and events[1].session_closed.reason == "client_close"
    assert effects.end_streams == [(2, "session_ended")]
    assert not effects.ended  # it ended once, before


def test_a_client_with_the_ending_gets_not_found() -> None:
    opened = open_session()
    s = opened.session
    s.close("client_close", now=1.0)
    with pytest.raises(StreamRefused) as refused:
        s.resume(opened.token, last_seq=1, now=2.0)
    assert (refused.value.status, refused.value.code) == (
        Status.NOT_FOUND,
        "session_resume_expired",
    )


def test_a_wrong_token_on_an_ended_session_learns_nothing() -> None:
    opened = open_session()
    s = opened.session
    s.close("client_close", now=1.0)
    with pytest.raises(StreamRefused) as refused:
        s.resume("x" * 43, last_seq=0, now=2.0)
    # The same answer as an unknown session: no hint that the token was wrong.
    assert (refused.value.status, refused.value.code) == (
        Status.NOT_FOUND,
        "session_resume_expired",
    )


def test_an_ending_past_the_journal_window_is_not_found() -> None:
    opened = open_session(limits=Limits(journal_ttl_s=5.0, disconnect_grace_s=60.0))
    s = opened.session
    s.close("client_close", now=1.0)
    with pytest.raises(StreamRefused):
        s.resume(opened.token, last_seq=0, now=10.0)  # the ending aged out of the journal


def test_tombstones_last_one_grace() -> None:
    opened = open_session(limits=Limits(disconnect_grace_s=10.0))
    s, registry = opened.session, opened.registry
    s.close("client_close", now=1.0)
    registry.discard(s)
    registry.tick(10.9)
    request = pb.ResumeSession(session_id=s.id, resume_token=opened.token)
    assert registry.resume(request, 10.9)[0] is s
    registry.tick(11.1)
    with pytest.raises(StreamRefused) as refused:
        registry.resume(request, 11.1)
    assert refused.value.code == "session_resume_expired"


def test_tombstones_are_bounded_by_max_sessions() -> None:
    opened = open_session(limits=Limits(max_sessions=2))
    registry = opened.registry
    first, first_token = opened.session, opened.token
    others = []
    for _ in range(2):
        session, effects = registry.open(pb.OpenSession(), 0.0)
        others.append((session, decode(effects)[0].session_created.resume_token))
        if len(registry) == 2:
            break
    first.close("client_close", now=1.0)
    registry.discard(first)
    for session, _ in others:
        session.close("client_close", now=1.0)
        registry.discard(session)
    third, effects = registry.open(pb.OpenSession(), 2.0)
    third_token = decode(effects)[0].session_created.resume_token
    third.close("client_close", now=3.0)
    registry.discard(third)
    # Three tombstones for two slots: the oldest is gone, the newest still answers.
    with pytest.raises(StreamRefused):
        registry.resume(pb.ResumeSession(session_id=first.id, resume_token=first_token), 3.0)
    found, _, _ = registry.resume(
        pb.ResumeSession(session_id=third.id, resume_token=third_token), 3.0
    )
    assert found is third


def test_an_expired_session_can_still_tell_its_client() -> None:
    opened = open_session(limits=Limits(disconnect_grace_s=5.0))
    s, registry = opened.session, opened.registry
    s.detach(1, now=1.0)
    ((expired_session, effects),) = registry.tick(6.0)
    assert expired_session is s and effects.ended
    generation, effects, _ = resume(s, opened.token, 0, now=7.0)
    events = decode(effects, generation)
    assert kinds(events) == ["session_resumed", "session_expired"]
    assert events[1].session_expired.reason == pb.EXPIRY_REASON_DISCONNECT_GRACE


def test_unparsable_input_gets_an_error_on_the_current_stream_only() -> None:
    opened = open_session()
    s = opened.session
    effects = s.refuse(1, CommandError("invalid_message", "not a ConverseRequest"), now=1.0)
    (event,) = decode(effects, 1)
    assert event.error.code == "invalid_message" and event.seq == 1
    assert event.error.type == pb.ERROR_TYPE_INVALID_REQUEST
    assert s.refuse(7, CommandError("invalid_message", "x"), now=1.0).sends == []
    s.receive(1, close(1), now=2.0)
    assert s.refuse(1, CommandError("invalid_message", "x"), now=3.0).sends == []


def test_the_first_request_on_a_resumed_stream_retires_the_old_token() -> None:
    opened = open_session()
    s = opened.session
    s.detach(1, now=1.0)
    generation, _ = s.resume(opened.token, 0, now=2.0)
    s.receive(generation, heartbeat(), now=2.1)  # the client speaks: it has the new token
    s.detach(generation, now=3.0)
    with pytest.raises(StreamRefused) as refused:
        s.resume(opened.token, 0, now=4.0)
    assert refused.value.code == "session_resume_expired"


def test_a_resumed_stream_lost_before_the_client_spoke_rolls_back() -> None:
    opened = open_session()
    s = opened.session
    s.detach(1, now=1.0)
    generation, _ = s.resume(opened.token, 0, now=2.0)
    s.detach(generation, now=2.5)  # cut before the client could read session_resumed
    again, _ = s.resume(opened.token, 0, now=3.0)  # the old token works once more
    assert again == generation + 1
    assert ENGINE.name  # the helper engine is the one in use
