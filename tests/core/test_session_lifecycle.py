"""Open, detach, takeover, expiry and close: one session from birth to its single ending."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from omni_grpc.core import CommandError, Effects, Limits, Session
from omni_grpc.core.limits import capabilities
from omni_grpc.wire import pb

from .helpers import (
    DEFAULT_INPUT,
    ENGINE,
    append,
    close,
    cmd,
    created,
    decode,
    done,
    handed,
    heartbeat,
    kinds,
    open_session,
    requests,
    resume,
    stamped,
    text,
    token_of,
    transcript,
)

GRACE = Limits().disconnect_grace_s
IDLE = Limits().idle_timeout_s


def test_session_created_is_unnumbered_and_carries_everything() -> None:
    opened = open_session(now=5.0)
    s = opened.session
    assert decode(opened.effects) == [
        pb.ConverseResponse(
            session_created=pb.SessionCreated(
                session=pb.Session(
                    id=s.id,
                    config=s.config,
                    state=pb.SESSION_STATE_ATTACHED,
                    turn_state=pb.TURN_STATE_IDLE,
                    epoch=0,
                ),
                capabilities=capabilities(Limits(), ENGINE),
                resume_token=opened.token,
                attachment_generation=1,
            )
        )
    ]
    assert opened.effects.sends[0][0] == 1
    assert s.journal.head == 0  # created is a handshake event, never replayed
    assert s.next_deadline() == 5.0 + IDLE


def test_generations_increment_on_every_resume() -> None:
    opened = open_session()
    s, token = opened.session, opened.token
    generations = []
    for step in range(4):
        if step % 2:
            s.detach(s.generation, now=float(step))
        generation, _, token = resume(s, token, 0, now=float(step))
        generations.append(generation)
    assert generations == [2, 3, 4, 5]


def test_takeover_replaces_the_old_stream_and_ignores_it_afterwards() -> None:
    opened = open_session()
    s = opened.session
    s.receive(1, heartbeat(1), now=1.0)
    generation, effects = s.resume(opened.token, s.journal.head, now=2.0)
    assert generation == 2
    assert decode(effects, 1) == [
        pb.ConverseResponse(
            applied_client_seq=1,
            session_replaced=pb.SessionReplaced(session_id=s.id, attachment_generation=1),
        )
    ]
    assert effects.end_streams == [(1, "session_replaced")]
    assert kinds(decode(effects, 2)) == ["session_resumed"]
    assert effects.sends[0][0] == 1  # the old stream hears first, then the new one
    assert not effects.ended
    for late in (text(2), close(2), heartbeat(0)):
        assert s.receive(1, late, now=3.0) == Effects()
    assert (s.applied_client_seq, s.state.name) == (1, "ATTACHED")
    assert requests(s.receive(2, text(2), now=4.0)) == [handed(text(2))]


def test_detach_of_a_stale_generation_is_a_no_op() -> None:
    opened = open_session()
    s = opened.session
    resume(s, opened.token, 0, now=1.0)
    assert s.detach(1, now=2.0) is False
    assert (s.state.name, s.detached_at) == ("ATTACHED", None)
    assert s.detach(2, now=3.0) is True
    assert s.detach(2, now=9.0) is False  # a second signal must not restart the grace
    assert s.detached_at == 3.0
    assert s.next_deadline() == 3.0 + GRACE


@pytest.mark.parametrize(("offset", "expires"), [(-0.001, False), (0.0, True), (5.0, True)])
def test_grace_expiry_happens_at_the_deadline_not_before(offset: float, expires: bool) -> None:
    opened = open_session()
    s, registry = opened.session, opened.registry
    s.detach(1, now=100.0)
    assert registry.next_deadline() == 100.0 + GRACE
    assert registry.tick(99.0 + GRACE) == []  # earlier ticks do nothing
    expired = registry.tick(100.0 + GRACE + offset)
    if not expires:
        assert (expired, s.state.name, len(registry)) == ([], "DETACHED", 1)
        return
    assert len(expired) == 1 and expired[0][0] is s
    effects = expired[0][1]
    assert (effects.sends, effects.end_streams, effects.ended) == ([], [], True)
    assert s.state.name == "EXPIRED"
    assert len(registry) == 0
    assert s.journal.replay_after(0, now=0.0) == [
        stamped(
            pb.ConverseResponse(
                session_expired=pb.SessionExpired(
                    session_id=s.id, reason=pb.EXPIRY_REASON_DISCONNECT_GRACE
                )
            ),
            1,
        ).SerializeToString()
    ]


def test_grace_runs_even_while_a_response_is_active() -> None:
    opened = open_session()
    s = opened.session
    s.publish(created("r1"), now=0.0)
    s.detach(1, now=1.0)
    assert s.next_deadline() == 1.0 + GRACE
    assert s.tick(1.0 + GRACE).ended


def test_idle_expiry_of_an_attached_session() -> None:
    opened = open_session(now=10.0)
    s = opened.session
    s.receive(1, heartbeat(), now=20.0)  # a command is activity, and pushes the deadline
    assert s.tick(20.0 + IDLE - 0.5) == Effects()
    effects = s.tick(20.0 + IDLE)
    assert decode(effects) == [
        pb.ConverseResponse(
            seq=2,
            session_expired=pb.SessionExpired(
                session_id=s.id, reason=pb.EXPIRY_REASON_IDLE_TIMEOUT
            ),
        )
    ]
    assert effects.end_streams == [(1, "session_expired")]
    assert effects.ended and s.state.name == "EXPIRED"


def test_the_idle_timeout_of_the_config_applies() -> None:
    config = pb.SessionConfig()
    config.idle_timeout.FromSeconds(7)
    s = open_session(config=config).session
    assert s.next_deadline() == 7.0
    assert s.tick(7.0).ended


def test_an_active_response_blocks_idle_expiry_and_its_end_restarts_the_clock() -> None:
    s = open_session().session
    s.publish(created("r1"), now=1.0)
    assert s.next_deadline() is None
    assert s.tick(10 * IDLE) == Effects()
    s.publish(done("r1"), now=10 * IDLE)
    assert s.next_deadline() == 11 * IDLE
    assert s.tick(11 * IDLE).ended


def test_engine_output_alone_is_not_activity() -> None:
    s = open_session().session
    s.publish(transcript("a"), now=IDLE - 1)
    assert s.next_deadline() == IDLE


def test_resume_is_activity() -> None:
    opened = open_session()
    s = opened.session
    s.detach(1, now=5.0)
    resume(s, opened.token, 0, now=6.0)
    assert (s.next_deadline(), s.detached_at) == (6.0 + IDLE, None)


Ending = Callable[[Session, float], Effects]
ENDINGS: dict[str, Ending] = {
    "close": lambda s, now: s.close("shutdown", now),
    "client_close": lambda s, now: s.receive(s.generation, close(s.applied_client_seq + 1), now),
    "expire": lambda s, now: s.expire(pb.EXPIRY_REASON_ENGINE_FAILURE, now),
    "tick": lambda s, now: s.tick(now + 10 * IDLE),
}


def terminal_event(first: str, session_id: str, attached: bool) -> pb.ConverseResponse:
    if first == "close":
        return pb.ConverseResponse(
            seq=1, session_closed=pb.SessionClosed(session_id=session_id, reason="shutdown")
        )
    if first == "client_close":
        return pb.ConverseResponse(
            seq=1,
            applied_client_seq=1,
            session_closed=pb.SessionClosed(session_id=session_id, reason="client_close"),
        )
    reason = (
        pb.EXPIRY_REASON_ENGINE_FAILURE
        if first == "expire"
        else pb.EXPIRY_REASON_IDLE_TIMEOUT
        if attached
        else pb.EXPIRY_REASON_DISCONNECT_GRACE
    )
    return pb.ConverseResponse(
        seq=1, session_expired=pb.SessionExpired(session_id=session_id, reason=reason)
    )


# A detached session has no stream to send a close on, so that pair is not a race.
RACES = [
    (first, second, attached)
    for first in ENDINGS
    for second in ENDINGS
    for attached in (True, False)
    if attached or first != "client_close"
]


@pytest.mark.parametrize(("first", "second", "attached"), RACES)
def test_exactly_one_terminal_event_whatever_the_order(
    first: str, second: str, attached: bool
) -> None:
    s = open_session().session
    if not attached:
        s.detach(1, now=0.5)
    one = ENDINGS[first](s, 1.0)
    two = ENDINGS[second](s, 2.0)
    assert one.ended
    assert two == Effects()
    expected = terminal_event(first, s.id, attached)
    history = [pb.ConverseResponse.FromString(p) for p in s.journal.replay_after(0, now=2.0)]
    assert history == [expected]
    assert decode(one) == ([expected] if attached else [])
    reason = "session_expired" if first in ("expire", "tick") else expected.session_closed.reason
    assert one.end_streams == ([(1, reason)] if attached else [])


def test_a_client_close_ends_the_stream_after_session_closed() -> None:
    s = open_session().session
    effects = s.receive(1, cmd(1, close_session=pb.CloseSession()), now=1.0)
    assert decode(effects) == [
        pb.ConverseResponse(
            seq=1,
            applied_client_seq=1,
            session_closed=pb.SessionClosed(session_id=s.id, reason="client_close"),
        )
    ]
    assert effects.end_streams == [(1, "client_close")]
    assert effects.ended and requests(effects) == []


def test_an_ended_session_ignores_everything() -> None:
    s = open_session().session
    s.close("shutdown", now=1.0)
    head = s.journal.head
    assert s.receive(1, heartbeat(), now=2.0) == Effects()
    assert s.publish(transcript("late"), now=2.0) == Effects()
    assert s.going_away(5.0, "drain") == Effects()
    assert s.detach(1, now=2.0) is False
    assert s.next_deadline() is None and s.tick(1e9) == Effects()
    assert (s.journal.head, s.responses.dropped_stale_events) == (head, 0)


def test_going_away_is_unnumbered_and_only_for_an_attached_stream() -> None:
    s = open_session().session
    effects = s.going_away(2.5, "drain")
    body = pb.GoingAway(reason="drain")
    body.time_left.FromMilliseconds(2500)
    assert decode(effects) == [pb.ConverseResponse(going_away=body)]
    assert s.journal.head == 0
    s.detach(1, now=0.0)
    assert s.going_away(2.5, "drain") == Effects()


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (pb.ConverseRequest(client_seq=1), "bad_event"),
        (cmd(0, open_session=pb.OpenSession()), "session_already_open"),
        (cmd(0, resume_session=pb.ResumeSession()), "unsupported_session_resume"),
    ],
)
def test_errors_keep_the_session_usable(request_: pb.ConverseRequest, code: str) -> None:
    s = open_session().session
    refused = decode(s.receive(1, request_, now=0.0))
    assert [event.error.code for event in refused] == [code]
    assert s.state.name == "ATTACHED"
    assert requests(s.receive(1, append(s.applied_client_seq + 1), now=0.0)) == [
        handed(append(s.applied_client_seq), DEFAULT_INPUT)
    ]


def test_unparsable_input_is_refused_in_band_on_the_current_stream_only() -> None:
    s = open_session().session
    s.receive(1, text(1), now=0.0)
    refusal = CommandError("bad_event", "not a ConverseRequest")
    assert decode(s.refuse(1, refusal, now=1.0)) == [
        pb.ConverseResponse(
            seq=1,
            applied_client_seq=1,
            error=pb.ErrorReport(
                code="bad_event",
                type=pb.ERROR_TYPE_INVALID_REQUEST,
                message="not a ConverseRequest",
            ),
        )
    ]
    assert s.refuse(2, refusal, now=1.0) == Effects()  # no such stream
    s.detach(1, now=2.0)
    assert s.refuse(1, refusal, now=2.0) == Effects()
    assert s.journal.head == 1


def test_effects_merge_concatenates_in_order() -> None:
    left = Effects(sends=[(1, b"a")], engine=[heartbeat(1)], end_streams=[(1, "x")])
    right = Effects(sends=[(2, b"b")], engine=[heartbeat(2)], ended=True)
    assert left.merge(right) is left
    assert left == Effects(
        sends=[(1, b"a"), (2, b"b")],
        engine=[heartbeat(1), heartbeat(2)],
        end_streams=[(1, "x")],
        ended=True,
    )
    assert Effects().merge(Effects()).ended is False


def test_view_and_repr() -> None:
    opened = open_session()
    s = opened.session
    assert repr(s) == f"Session({s.id}, ATTACHED, generation=1)"
    s.detach(1, now=0.0)
    assert s.view().state == pb.SESSION_STATE_DETACHED
    _, effects, _ = resume(s, opened.token, 0, now=0.0)
    assert token_of(effects) != opened.token
