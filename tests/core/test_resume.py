"""Resume: the activation, the replay that follows it, and every way a resume is refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from omni_grpc.core import Limits, Registry, ResumeGap, Status, StreamRefused
from omni_grpc.wire import pb

from .helpers import (
    ENGINE,
    ack,
    decode,
    heartbeat,
    open_session,
    requests,
    resume,
    stamped,
    text,
    token_of,
    transcript,
)


def test_resume_sends_resumed_then_the_missed_events_then_live_ones() -> None:
    opened = open_session()
    s = opened.session
    s.receive(1, text(1), now=1.0)
    s.publish(transcript("seen"), now=1.0)
    s.detach(1, now=2.0)
    s.publish(transcript("missed-1"), now=3.0)
    s.receive(1, text(2), now=3.0)  # a dead stream's command: ignored
    s.publish(transcript("missed-2"), now=4.0)
    generation, effects = s.resume(opened.token, 1, now=5.0)
    events = decode(effects)
    assert {target for target, _ in effects.sends} == {generation}
    assert events[0] == pb.ConverseResponse(
        applied_client_seq=1,
        session_resumed=pb.SessionResumed(
            session=pb.Session(
                id=s.id,
                config=s.config,
                state=pb.SESSION_STATE_ATTACHED,
                turn_state=pb.TURN_STATE_IDLE,
            ),
            resume_token=events[0].session_resumed.resume_token,
            attachment_generation=2,
            replayed_events=2,
        ),
    )
    assert events[1:] == [
        stamped(transcript("missed-1"), 2, applied=1),
        stamped(transcript("missed-2"), 3, applied=1),
    ]
    live = s.publish(transcript("live"), now=6.0)
    assert decode(live, generation) == [stamped(transcript("live"), 4, applied=1)]


def test_resumed_carries_the_applied_client_seq_for_resending() -> None:
    opened = open_session()
    s = opened.session
    for client_seq in (1, 2, 3):
        s.receive(1, text(client_seq), now=0.0)
    s.detach(1, now=0.0)
    _, effects = s.resume(opened.token, 0, now=0.0)
    assert decode(effects)[0].applied_client_seq == 3
    assert decode(effects)[0].session_resumed.replayed_events == 0


def test_takeover_with_the_current_cursor_replays_nothing() -> None:
    opened = open_session()
    s = opened.session
    s.publish(transcript("a"), now=0.0)
    generation, effects = s.resume(opened.token, 1, now=1.0)
    assert [event.WhichOneof("event") for event in decode(effects, generation)] == [
        "session_resumed"
    ]


def expired_refusal(call: Callable[[], object]) -> tuple[Status, str]:
    with pytest.raises(StreamRefused) as refused:
        call()
    return refused.value.status, refused.value.code


def test_resume_after_the_end_with_nothing_missed_is_refused() -> None:
    opened = open_session()
    s, registry = opened.session, opened.registry
    effects = s.close("shutdown", now=1.0)
    assert effects.ended
    registry.discard(s)  # what the transport does when an effect says the session ended
    request = pb.ResumeSession(session_id=s.id, resume_token=opened.token, last_received_seq=1)
    assert expired_refusal(lambda: s.resume(opened.token, 1, now=2.0)) == (
        Status.NOT_FOUND,
        "session_resume_expired",
    )
    assert expired_refusal(lambda: registry.resume(request, now=2.0)) == (
        Status.NOT_FOUND,
        "session_resume_expired",
    )
    # A wrong token gets the same answer: an ended session gives no hint about tokens.
    assert expired_refusal(lambda: s.resume("wrong", 0, now=2.0)) == (
        Status.NOT_FOUND,
        "session_resume_expired",
    )


def test_resume_after_the_end_replays_the_missed_ending_and_ends_the_stream() -> None:
    opened = open_session()
    s, registry = opened.session, opened.registry
    s.receive(1, text(1), now=0.0)
    s.publish(transcript("a"), now=0.0)
    s.detach(1, now=1.0)
    [(_, expiry)] = registry.tick(1.0 + Limits().disconnect_grace_s)
    assert expiry.sends == []  # nobody heard the ending
    missed = s.journal.replay_after(0, now=31.0)
    generation, effects = registry.resume(
        pb.ResumeSession(session_id=s.id, resume_token=opened.token, last_received_seq=0), now=31.0
    )[1:]
    assert generation == 2
    assert [target for target, _ in effects.sends] == [generation] * 3
    assert decode(effects)[0] == pb.ConverseResponse(
        applied_client_seq=1,
        session_resumed=pb.SessionResumed(
            session=s.view(), attachment_generation=2, replayed_events=2
        ),
    )
    assert decode(effects)[0].session_resumed.session.state == pb.SESSION_STATE_EXPIRED
    assert [payload for _, payload in effects.sends[1:]] == missed
    assert decode(effects)[-1].session_expired.reason == pb.EXPIRY_REASON_DISCONNECT_GRACE
    assert effects.end_streams == [(generation, "session_ended")]
    assert (requests(effects), effects.ended, s.state.name) == ([], False, "EXPIRED")


def test_an_ended_session_is_forgotten_after_one_grace() -> None:
    grace = Limits().disconnect_grace_s
    opened = open_session()
    s, registry = opened.session, opened.registry
    s.publish(transcript("a"), now=0.0)
    s.close("shutdown", now=10.0)
    registry.discard(s)
    request = pb.ResumeSession(session_id=s.id, resume_token=opened.token, last_received_seq=1)
    registry.tick(10.0 + grace - 0.5)
    assert registry.resume(request, now=10.0 + grace - 0.5)[0] is s  # still a tombstone
    registry.tick(10.0 + grace)
    with pytest.raises(StreamRefused) as refused:
        registry.resume(request, now=10.0 + grace)
    assert refused.value.message == "unknown or expired session"


def test_tombstones_are_bounded_by_max_sessions() -> None:
    registry = Registry(Limits(max_sessions=2), ENGINE)
    ended = []
    for _ in range(3):
        session, effects = registry.open(pb.OpenSession(), now=0.0)
        session.publish(transcript("a"), now=0.0)
        session.close("shutdown", now=0.0)
        registry.discard(session)
        ended.append((session, token_of(effects)))
    found = []
    for session, token in ended:
        try:
            registry.resume(pb.ResumeSession(session_id=session.id, resume_token=token), 0.0)
            found.append(True)
        except StreamRefused:
            found.append(False)
    assert found == [False, True, True]  # the oldest made room


def test_resume_after_the_end_with_a_gap_is_refused() -> None:
    opened = open_session()
    s = opened.session
    s.publish(transcript("a"), now=0.0)
    s.publish(transcript("b"), now=0.0)
    s.receive(1, ack(2), now=0.0)
    s.detach(1, now=0.0)
    s.close("shutdown", now=1.0)
    assert expired_refusal(lambda: s.resume(opened.token, 1, now=2.0)) == (
        Status.NOT_FOUND,
        "session_resume_expired",
    )
    assert expired_refusal(lambda: s.resume(opened.token, 9, now=2.0)) == (
        Status.NOT_FOUND,
        "session_resume_expired",
    )
    _, effects = s.resume(opened.token, 2, now=2.0)  # from its real cursor, it gets the end
    assert [event.WhichOneof("event") for event in decode(effects)] == [
        "session_resumed",
        "session_closed",
    ]


def test_resume_with_a_cursor_ahead_is_a_conflict() -> None:
    opened = open_session()
    s = opened.session
    s.publish(transcript("a"), now=0.0)
    s.detach(1, now=0.0)
    with pytest.raises(StreamRefused) as refused:
        s.resume(opened.token, 2, now=1.0)
    assert (refused.value.status, refused.value.code, refused.value.message) == (
        Status.FAILED_PRECONDITION,
        "session_resume_conflict",
        "seq 2 is ahead of the newest event 1",
    )
    assert (s.state.name, s.generation) == ("DETACHED", 1)
    assert resume(s, opened.token, 1, now=2.0)[0] == 2  # the token was not spent


def test_a_cursor_behind_the_acknowledged_events_is_a_gap() -> None:
    opened = open_session()
    s = opened.session
    s.receive(1, text(1), now=0.0)
    for marker in "abc":
        s.publish(transcript(marker), now=0.0)
    s.receive(1, ack(2), now=0.0)
    s.detach(1, now=0.0)
    kept = r"events after 1 are no longer kept \(kept from 3\)"
    with pytest.raises(ResumeGap, match=kept) as gap:
        s.resume(opened.token, 1, now=1.0)
    assert pb.ConverseResponse.FromString(gap.value.payload) == pb.ConverseResponse(
        applied_client_seq=1,
        resync_required=pb.ResyncRequired(session_id=s.id, reason=pb.RESYNC_REASON_JOURNAL_GAP),
    )
    assert (s.state.name, s.generation) == ("DETACHED", 1)  # a gap changes nothing
    _, effects, _ = resume(s, opened.token, 2, now=1.0)
    assert decode(effects)[1:] == [stamped(transcript("c"), 3, applied=1)]


def test_a_cursor_older_than_the_window_is_a_gap() -> None:
    opened = open_session(limits=Limits(journal_ttl_s=60.0, disconnect_grace_s=1000.0))
    s = opened.session
    s.publish(transcript("old"), now=0.0)
    s.detach(1, now=1.0)
    s.publish(transcript("new"), now=50.0)
    with pytest.raises(ResumeGap) as gap:
        s.resume(opened.token, 0, now=60.5)
    assert pb.ConverseResponse.FromString(gap.value.payload).resync_required.reason == (
        pb.RESYNC_REASON_JOURNAL_GAP
    )
    _, effects, _ = resume(s, opened.token, 1, now=60.5)
    assert decode(effects)[1:] == [stamped(transcript("new"), 2)]


@pytest.mark.parametrize(
    ("request_", "status", "code"),
    [
        (pb.ResumeSession(resume_token="t"), Status.INVALID_ARGUMENT, "invalid_session_resume"),
        (pb.ResumeSession(session_id="s"), Status.INVALID_ARGUMENT, "invalid_session_resume"),
        (
            pb.ResumeSession(session_id="sess_nope", resume_token="t"),
            Status.NOT_FOUND,
            "session_resume_expired",
        ),
    ],
)
def test_registry_refuses_malformed_and_unknown_resumes(
    request_: pb.ResumeSession, status: Status, code: str
) -> None:
    registry = open_session().registry
    with pytest.raises(StreamRefused) as refused:
        registry.resume(request_, now=0.0)
    assert (refused.value.status, refused.value.code) == (status, code)


def test_registry_resume_finds_the_session_and_returns_its_generation() -> None:
    opened = open_session()
    registry, s = opened.registry, opened.session
    s.detach(1, now=0.0)
    found, generation, effects = registry.resume(
        pb.ResumeSession(session_id=s.id, resume_token=opened.token, last_received_seq=0), now=1.0
    )
    assert (found, generation) == (s, 2)
    assert decode(effects)[0].session_resumed.attachment_generation == 2


def test_a_wrong_token_is_refused_before_the_journal_is_consulted() -> None:
    opened = open_session()
    s = opened.session
    s.detach(1, now=0.0)
    with pytest.raises(StreamRefused) as refused:
        s.resume("not-the-token", 99, now=0.0)  # the cursor is bad too; the token wins
    assert (refused.value.status, refused.value.code) == (
        Status.NOT_FOUND,
        "session_resume_expired",
    )


def test_failed_activation_detaches_and_starts_the_grace() -> None:
    opened = open_session()
    s = opened.session
    s.receive(1, heartbeat(), now=0.0)
    generation, _ = s.resume(opened.token, 0, now=1.0)  # a takeover that never arrives
    assert s.detach(generation, now=2.0)  # the stream died before the client read it
    assert (s.state.name, s.detached_at) == ("DETACHED", 2.0)
    assert s.next_deadline() == 2.0 + Limits().disconnect_grace_s
    # The events survive for the retry, which still gets everything after its cursor.
    generation, effects, _ = resume(s, opened.token, 0, now=3.0)
    assert generation == 3
    assert [e.WhichOneof("event") for e in decode(effects)] == ["session_resumed", "heartbeat_ack"]
