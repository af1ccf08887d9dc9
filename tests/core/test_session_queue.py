"""The queue of new sessions at capacity, without a server: room, order, classes and the
no-starvation bound, the bounds, streams that go and come back, estimates and notices."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from omni_grpc.core import Limits, Registry, State, Status, StreamRefused
from omni_grpc.core.session_queue import (
    DEFAULT_CLASS,
    LENGTHS_KEPT,
    QueuePolicy,
    SessionQueue,
    Ticket,
)
from omni_grpc.wire import pb

from .conftest import CORE_STATEFUL_PROFILE
from .helpers import ENGINE, decode

OPEN = pb.OpenSession()
GOLD, SILVER = "gold", "silver"
CLASSES = (GOLD, SILVER, DEFAULT_CLASS)
KEYS = {"gold-key": GOLD, "silver-key": SILVER}


def queue(capacity: int = 1, **policy: object) -> SessionQueue:
    made = QueuePolicy(capacity=capacity, classes=CLASSES, **policy)  # type: ignore[arg-type]
    return SessionQueue(made, KEYS)


def notice(payload: bytes) -> pb.SessionQueued:
    event = pb.ConverseResponse.FromString(payload)
    assert event.WhichOneof("event") == "session_queued" and event.seq == 0
    return event.session_queued


def positions(q: SessionQueue) -> list[str]:
    return [ticket.id for ticket in q.order()]


# -- room ----------------------------------------------------------------------------------


def test_a_session_that_finds_room_is_admitted_at_once() -> None:
    q = queue(capacity=2)
    first = q.arrive(OPEN, 0.0, key="", started=[])
    second = q.arrive(OPEN, 0.0, key="", started=[])
    assert first.granted and second.granted and q.pending == 2 and len(q) == 0
    assert q.opened(first, 0.5) == 0.5 and q.pending == 1
    third = q.arrive(OPEN, 1.0, key="", started=[0.5, 0.5])  # two live: the server is full
    assert not third.granted and len(q) == 1 and q.holds(third.id)


def test_places_free_as_sessions_end_and_go_to_the_first_in_line() -> None:
    q = queue(capacity=1)
    waiting = [q.arrive(OPEN, float(t), key="", started=[0.0]) for t in range(3)]
    assert q.grant(live=1) == []  # no room while the live session holds it
    assert q.grant(live=0) == [waiting[0]]
    assert q.grant(live=0) == []  # the admitted one holds the place until it opens
    q.opened(waiting[0], 5.0)
    assert q.grant(live=1) == []
    assert q.grant(live=0) == [waiting[1]]


def test_nobody_jumps_the_queue_while_someone_waits_with_a_stream() -> None:
    q = queue(capacity=1)
    first = q.arrive(OPEN, 0.0, key="", started=[0.0])
    second = q.arrive(OPEN, 1.0, key="", started=[])  # a place is free, but first waits
    assert not second.granted
    assert q.grant(live=0) == [first]


def test_a_full_queue_refuses_typed_and_retryable_with_when_a_place_frees() -> None:
    q = queue(capacity=1, max_length=2, retry_after_s=0.5)
    for length in (10.0,) * 3:
        q.ended(length)
    for _ in range(2):
        q.arrive(OPEN, 0.0, key="", started=[-4.0])
    with pytest.raises(StreamRefused) as refused:
        q.arrive(OPEN, 0.0, key="", started=[-4.0])
    error = refused.value
    assert (error.status, error.code, error.retryable) == (
        Status.RESOURCE_EXHAUSTED,
        "queue_full",
        True,
    )
    assert error.retry_after_s == pytest.approx(6.0)  # the live one, 4 s into its 10
    assert error.to_error().type == pb.ERROR_TYPE_RATE_LIMIT
    assert len(q) == 2


def test_a_queue_of_length_zero_refuses_every_session_that_would_wait() -> None:
    q = queue(capacity=1, max_length=0)
    assert q.arrive(OPEN, 0.0, key="", started=[]).granted
    with pytest.raises(StreamRefused, match="queue_full"):
        q.arrive(OPEN, 0.0, key="", started=[0.0])


# -- order and classes ---------------------------------------------------------------------


def test_first_come_first_served_inside_a_class() -> None:
    q = queue(capacity=1)
    tickets = [q.arrive(OPEN, float(t), key="", started=[0.0]) for t in range(5)]
    admitted = []
    for _ in tickets:
        (ticket,) = q.grant(live=0)
        q.opened(ticket, 9.0)
        admitted.append(ticket)
    assert admitted == tickets


def test_a_key_names_its_class_and_unknown_keys_are_default() -> None:
    q = queue()
    assert (q.class_of("gold-key"), q.class_of("silver-key")) == (GOLD, SILVER)
    assert q.class_of("") == q.class_of("another") == DEFAULT_CLASS
    with pytest.raises(ValueError, match="unknown classes"):
        SessionQueue(QueuePolicy(capacity=1), {"k": GOLD})


def test_a_higher_class_goes_first() -> None:
    q = queue(capacity=1)
    low = q.arrive(OPEN, 0.0, key="", started=[0.0])
    mid = q.arrive(OPEN, 1.0, key="silver-key", started=[0.0])
    high = q.arrive(OPEN, 2.0, key="gold-key", started=[0.0])
    assert positions(q) == [high.id, mid.id, low.id]
    assert [(t.klass, t.rank) for t in (high, mid, low)] == [(GOLD, 0), (SILVER, 1), ("default", 2)]


def test_a_head_passed_over_max_overtakes_times_falls_due_and_goes_next() -> None:
    q = queue(capacity=1, max_overtakes=2)
    low = q.arrive(OPEN, 0.0, key="", started=[0.0])
    golds = [q.arrive(OPEN, 1.0, key="gold-key", started=[0.0]) for _ in range(5)]
    admitted = []
    for _ in range(4):
        (ticket,) = q.grant(live=0)
        q.opened(ticket, 2.0)
        admitted.append(ticket)
    assert admitted == [golds[0], golds[1], low, golds[2]]
    assert low.overtaken == 2 and low.due == 2


def test_due_heads_go_in_the_order_they_fell_due() -> None:
    q = queue(capacity=1, max_overtakes=1)
    silver = q.arrive(OPEN, 0.0, key="silver-key", started=[0.0])
    golds = [q.arrive(OPEN, 0.0, key="gold-key", started=[0.0]) for _ in range(4)]
    (first,) = q.grant(live=0)  # gold goes: silver is passed over once, and falls due
    q.opened(first, 0.0)
    low = q.arrive(OPEN, 0.0, key="", started=[0.0])
    order = [first]
    for _ in range(4):
        (ticket,) = q.grant(live=0)
        q.opened(ticket, 0.0)
        order.append(ticket)
    # Silver fell due first; passed over by it, the next gold and the default head fell due
    # together, and go highest class first.
    assert order == [golds[0], silver, golds[1], low, golds[2]]
    assert q.policy.starvation_bound == 1 + 3 - 1


def test_the_order_told_is_the_order_admitted() -> None:
    q = queue(capacity=1, max_overtakes=2)
    for key in ("", "gold-key", "silver-key", "gold-key", "", "gold-key", "gold-key", ""):
        q.arrive(OPEN, 0.0, key=key, started=[0.0])
    told = positions(q)
    admitted = []
    while ticket := q.grant(live=0):
        q.opened(ticket[0], 0.0)
        admitted.append(ticket[0].id)
    assert admitted == told


class QueueMachine(RuleBasedStateMachine):
    """Random arrivals in three classes, ends, cuts and comebacks: first come first served
    inside a class always, and (while no stream was cut) no head passed over more than the
    bound."""

    def __init__(self) -> None:
        super().__init__()
        self.q = queue(capacity=2, max_overtakes=2, max_length=1000)
        self.live: list[Ticket] = []
        self.passed: dict[Ticket, int] = {}  # admissions of others while each was a head
        self.cut = False  # a stream went once: the bound no longer holds by its proof
        self.now = 0.0

    def heads(self) -> set[Ticket]:
        firsts = {}
        for ticket in sorted(self.waiting(), key=lambda t: t.order):
            firsts.setdefault(ticket.rank, ticket)
        return set(firsts.values())

    def waiting(self) -> list[Ticket]:
        return [t for t in self.q._tickets.values() if not t.granted and t.attached]

    def admit(self) -> None:
        heads = self.heads()
        for ticket in self.q.grant(live=len(self.live)):
            earlier = [
                t for t in self.waiting() if t.rank == ticket.rank and t.order < ticket.order
            ]
            assert not earlier, (ticket, earlier)  # first come, first served in a class
            for head in heads - {ticket}:
                self.passed[head] = self.passed.get(head, 0) + 1
                if not self.cut:
                    assert self.passed[head] <= self.q.policy.starvation_bound
            self.q.opened(ticket, self.now)
            self.live.append(ticket)
            heads = self.heads()

    @rule(key=st.sampled_from(["", "gold-key", "silver-key"]))
    def arrive(self, key: str) -> None:
        self.now += 1
        ticket = self.q.arrive(OPEN, self.now, key=key, started=[0.0] * len(self.live))
        if ticket.granted:
            self.q.opened(ticket, self.now)
            self.live.append(ticket)
        self.admit()

    @precondition(lambda self: self.live)
    @rule(index=st.integers(0, 10))
    def end(self, index: int) -> None:
        ended = self.live.pop(index % len(self.live))
        self.q.ended(self.now - ended.joined_at + 1)
        self.admit()

    @precondition(lambda self: self.waiting())
    @rule(index=st.integers(0, 100))
    def cut_and_come_back(self, index: int) -> None:
        self.cut = True
        waiting = self.waiting()
        ticket = waiting[index % len(waiting)]
        assert self.q.detach(ticket, ticket.generation, self.now)
        self.admit()  # passed over while away
        assert not ticket.granted
        token = ticket.lock.resume.issue()  # the test kept no notice: a token it knows
        assert self.q.resume(ticket.id, token, key=ticket_key(ticket)) == (ticket, None)
        self.admit()

    @invariant()
    def room_is_never_exceeded(self) -> None:
        assert len(self.live) + self.q.pending <= self.q.policy.capacity
        if len(self.live) < self.q.policy.capacity:
            assert not self.waiting()  # a free place never idles while someone waits


def ticket_key(ticket: Ticket) -> str:
    return {GOLD: "gold-key", SILVER: "silver-key"}.get(ticket.klass, "")


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(settings.get_profile(CORE_STATEFUL_PROFILE))


# -- streams that go and come back ---------------------------------------------------------


def test_the_first_notice_carries_the_token_that_resumes_the_wait() -> None:
    q = queue(capacity=1)
    ticket = q.arrive(OPEN, 0.0, key="k", started=[0.0])
    ((_, first),) = q.notices(0.0, [0.0])
    told = notice(first)
    assert (told.session_id, told.position, told.priority_class) == (ticket.id, 1, "default")
    assert told.resume_token and ticket.token == ""
    q.detach(ticket, 1, 1.0)
    resumed, replaced = q.resume(ticket.id, told.resume_token, key="k")
    assert (resumed, replaced, resumed.generation) == (ticket, None, 2)
    ((_, again),) = q.notices(1.0, [0.0])  # a new stream is told at once, without the token
    assert notice(again).resume_token == "" and notice(again).position == 1


def test_a_session_whose_stream_went_keeps_its_place_and_is_passed_over_meanwhile() -> None:
    q = queue(capacity=1, grace_s=30.0)
    first = q.arrive(OPEN, 0.0, key="", started=[0.0])
    token = notice(q.notices(0.0, [0.0])[0][1]).resume_token
    second = q.arrive(OPEN, 1.0, key="", started=[0.0])
    third = q.arrive(OPEN, 2.0, key="", started=[0.0])
    assert q.detach(first, 1, 3.0)
    assert not q.detach(first, 1, 3.0)  # once
    assert positions(q) == [second.id, third.id]  # counted in nobody's position
    assert q.grant(live=0) == [second]
    q.opened(second, 4.0)
    q.resume(first.id, token, key="")
    assert positions(q) == [first.id, third.id]  # its place back: ahead of third
    assert q.grant(live=0) == [first]


def test_a_session_admitted_as_its_stream_went_goes_back_to_its_place() -> None:
    q = queue(capacity=1)
    first = q.arrive(OPEN, 0.0, key="", started=[0.0])
    second = q.arrive(OPEN, 1.0, key="", started=[0.0])
    assert q.grant(live=0) == [first] and q.pending == 1
    assert q.detach(first, 1, 2.0)
    assert q.pending == 0 and not first.granted and len(q) == 2
    assert q.grant(live=0) == [second]  # first is away; second may go


def test_after_the_grace_a_session_without_a_stream_has_left() -> None:
    q = queue(capacity=1, grace_s=5.0, max_wait_s=100.0)
    ticket = q.arrive(OPEN, 0.0, key="", started=[0.0])
    token = notice(q.notices(0.0, [0.0])[0][1]).resume_token
    q.detach(ticket, 1, 10.0)
    assert q.next_deadline() == 15.0
    assert q.tick(14.9, [0.0]) == []
    (leaving,) = q.tick(15.0, [0.0])
    assert (leaving.ticket, leaving.reason, leaving.refusal) == (ticket, "grace_lapsed", None)
    assert not q.holds(ticket.id) and len(q) == 0
    with pytest.raises(StreamRefused) as refused:
        q.resume(ticket.id, token, key="")
    assert (refused.value.status, refused.value.code) == (
        Status.NOT_FOUND,
        "session_resume_expired",
    )


@pytest.mark.parametrize("wrong", ["key", "token", "id"])
def test_a_resume_with_another_key_a_wrong_token_or_id_gets_the_unknown_answer(
    wrong: str,
) -> None:
    q = queue(capacity=1)
    ticket = q.arrive(OPEN, 0.0, key="k", started=[0.0])
    token = notice(q.notices(0.0, [0.0])[0][1]).resume_token
    session_id, key = ticket.id, "k"
    if wrong == "key":
        key = "other"
    elif wrong == "token":
        token = token[:-2] + "xx"
    else:
        session_id = "sess_" + "0" * 32
    with pytest.raises(StreamRefused) as refused:
        q.resume(session_id, token, key=key)
    assert refused.value.code == "session_resume_expired"
    assert ticket.generation == 1 and ticket.attached


def test_a_resume_while_a_stream_waits_takes_the_wait_over() -> None:
    q = queue(capacity=1)
    ticket = q.arrive(OPEN, 0.0, key="", started=[0.0])
    token = notice(q.notices(0.0, [0.0])[0][1]).resume_token
    assert q.resume(ticket.id, token, key="") == (ticket, 1)
    assert ticket.generation == 2 and ticket.attached
    assert not q.detach(ticket, 1, 1.0)  # the replaced stream going changes nothing


def test_waiting_too_long_is_refused_typed_and_retryable() -> None:
    q = queue(capacity=1, max_wait_s=60.0, grace_s=100.0, retry_after_s=1.0)
    q.ended(20.0)
    attached = q.arrive(OPEN, 0.0, key="", started=[0.0])
    away = q.arrive(OPEN, 1.0, key="", started=[0.0])
    q.detach(away, 1, 2.0)
    assert q.next_deadline() == 60.0
    (first,) = q.tick(60.0, [50.0])
    assert (first.ticket, first.reason) == (attached, "queue_wait_exceeded")
    assert first.refusal is not None
    refusal = first.refusal
    assert (refusal.status, refusal.code, refusal.retryable) == (
        Status.RESOURCE_EXHAUSTED,
        "queue_wait_exceeded",
        True,
    )
    assert refusal.retry_after_s == pytest.approx(10.0)  # the live one, 10 s into its 20
    (second,) = q.tick(61.0, [50.0])
    assert (second.ticket, second.reason, second.refusal) == (away, "queue_wait_exceeded", None)


def test_draining_lets_every_waiting_session_go() -> None:
    q = queue(capacity=1)
    granted = q.arrive(OPEN, 0.0, key="", started=[])
    waiting = [q.arrive(OPEN, 0.0, key="", started=[0.0]) for _ in range(3)]
    assert q.drain() == waiting
    assert len(q) == 0 and q.holds(granted.id) and not q.holds(waiting[0].id)
    assert q.waiting() == dict.fromkeys(CLASSES, (0, 0))


def test_waiting_counts_by_class_with_and_without_a_stream() -> None:
    q = queue(capacity=1)
    q.arrive(OPEN, 0.0, key="gold-key", started=[0.0])
    away = q.arrive(OPEN, 0.0, key="", started=[0.0])
    q.arrive(OPEN, 0.0, key="", started=[0.0])
    q.detach(away, 1, 0.0)
    assert q.waiting() == {GOLD: (1, 0), SILVER: (0, 0), DEFAULT_CLASS: (1, 1)}


# -- estimates and notices -----------------------------------------------------------------


def test_estimates_play_the_queue_forward_on_the_observed_lengths() -> None:
    q = queue(capacity=2)
    for _ in range(4):
        q.ended(10.0)
    started = [96.0, 94.0]  # 4 s and 6 s into sessions that last 10
    for _ in range(4):
        q.arrive(OPEN, 100.0, key="", started=started)
    waits = [wait for _, wait in q.estimates(100.0, started)]
    assert waits == pytest.approx([4.0, 6.0, 14.0, 16.0])


def test_a_live_session_is_expected_to_last_as_the_observed_ones_longer_than_its_age() -> None:
    q = queue(capacity=1)
    for length in (2.0, 8.0, 12.0):
        q.ended(length)
    q.arrive(OPEN, 10.0, key="", started=[5.0])  # 5 s old: 8 and 12 are longer, 3 and 7 left
    ((_, wait),) = q.estimates(10.0, [5.0])
    assert wait == pytest.approx(5.0)
    q2 = queue(capacity=1)
    q2.ended(4.0)
    q2.arrive(OPEN, 10.0, key="", started=[0.0])  # outlived every observed length: half the mean
    assert q2.estimates(10.0, [0.0])[0][1] == pytest.approx(2.0)


def test_before_any_session_ended_a_session_is_guessed_at_twice_the_mean_age() -> None:
    q = queue(capacity=2)
    started = [90.0, 94.0]  # 10 s and 6 s old: a guessed length of 16 s
    for _ in range(3):
        q.arrive(OPEN, 100.0, key="", started=started)
    waits = [wait for _, wait in q.estimates(100.0, started)]
    assert waits == pytest.approx([6.0, 10.0, 22.0])


def test_a_lower_class_wait_is_stretched_by_the_arrivals_of_the_classes_above() -> None:
    q = queue(capacity=2)
    for _ in range(3):
        q.ended(10.0)
    for at in (0.0, 10.0):  # gold keeps arriving: a place free each time
        q.opened(q.arrive(OPEN, at, key="gold-key", started=[]), at)
    started = [20.0, 20.0]
    gold = q.arrive(OPEN, 20.0, key="gold-key", started=started)
    low = q.arrive(OPEN, 20.0, key="", started=started)
    # Gold arrives at 3 in 20 s, each for 10 s of the 2 places: 75 % of them. Both wait for a
    # place 10 s away; the default class gets a quarter of the admissions meanwhile.
    assert q.estimates(20.0, started) == [(gold, pytest.approx(10.0)), (low, pytest.approx(40.0))]


def test_no_class_is_told_less_than_its_no_starvation_share() -> None:
    q = queue(capacity=1, max_overtakes=2)
    for _ in range(3):
        q.ended(10.0)
    for at in range(10):  # gold alone would fill the place many times over
        q.opened(q.arrive(OPEN, float(at), key="gold-key", started=[]), float(at))
    low = q.arrive(OPEN, 10.0, key="", started=[10.0])
    bound = q.policy.starvation_bound  # 2 + 3 - 1: one admission in 5 at least
    assert q.estimates(10.0, [10.0]) == [(low, pytest.approx(10.0 * (bound + 1)))]


def test_a_wait_that_will_run_out_first_leaves_its_place_to_the_next() -> None:
    q = queue(capacity=1, max_wait_s=17.0)
    for _ in range(3):
        q.ended(10.0)
    started = [0.0]  # the live session ends at 10
    early = q.arrive(OPEN, 0.0, key="", started=started)  # a place at 10: in time
    late = q.arrive(OPEN, 0.0, key="", started=started)  # at 20, past its 17: it will leave
    last = q.arrive(OPEN, 4.0, key="", started=started)  # so its place comes at 20, not 30
    assert q.estimates(4.0, started) == [
        (early, pytest.approx(6.0)),
        (late, pytest.approx(16.0)),
        (last, pytest.approx(16.0)),
    ]


def test_only_the_latest_lengths_are_learnt_from() -> None:
    q = queue(capacity=1)
    for _ in range(LENGTHS_KEPT):
        q.ended(100.0)
    for _ in range(LENGTHS_KEPT):
        q.ended(10.0)
    q.arrive(OPEN, 0.0, key="", started=[0.0])
    assert q.estimates(0.0, [0.0])[0][1] == pytest.approx(10.0)


def test_a_waiting_session_is_told_again_when_its_place_or_its_estimate_changes() -> None:
    q = queue(capacity=1)
    for _ in range(3):
        q.ended(10.0)
    first = q.arrive(OPEN, 0.0, key="", started=[0.0])
    second = q.arrive(OPEN, 0.0, key="", started=[0.0])
    told = q.notices(0.0, [0.0])
    assert [(t, notice(p).position) for t, p in told] == [(first, 1), (second, 2)]
    assert [notice(p).estimated_wait.ToMilliseconds() for _, p in told] == [10_000, 20_000]
    assert q.notices(5.0, [0.0]) == []  # the countdown holds: nothing to tell
    high = q.arrive(OPEN, 5.0, key="gold-key", started=[0.0])
    told = q.notices(5.0, [0.0])
    assert [(t, notice(p).position) for t, p in told] == [(high, 1), (first, 2), (second, 3)]
    # The live session outlives its expected length: every estimate strays, and is told.
    told = q.notices(14.0, [0.0])
    assert [t for t, _ in told] == [high, first, second]
    assert notice(told[0][1]).estimated_wait.ToMilliseconds() == 5_000  # half the mean


def test_an_estimate_strays_by_the_larger_of_a_second_and_a_fifth() -> None:
    q = queue(capacity=1)
    q.ended(100.0)
    q.arrive(OPEN, 0.0, key="", started=[0.0])
    assert len(q.notices(0.0, [0.0])) == 1  # 100 s
    q.ended(80.0)  # the mean falls to 90 s: 10 s off, under a fifth
    assert q.notices(0.0, [0.0]) == []
    q.ended(1.0)
    assert len(q.notices(0.0, [0.0])) == 1


def test_the_policy_is_checked() -> None:
    for bad in (
        {"capacity": 0},
        {"capacity": 1, "max_overtakes": 0},
        {"capacity": 1, "max_wait_s": 0},
        {"capacity": 1, "classes": ("gold",)},
        {"capacity": 1, "classes": ("default", "default")},
    ):
        with pytest.raises(ValueError):
            QueuePolicy(**bad)  # type: ignore[arg-type]


# -- the session it becomes ----------------------------------------------------------------


def test_the_wait_token_resumes_the_opened_session_until_the_client_speaks() -> None:
    """A stream cut just as session_created went out: the client holds only the wait's token,
    which resumes the session once; the session's own token is what it holds after that."""
    q = queue(capacity=1)
    registry = Registry(Limits(), ENGINE)
    ticket = q.arrive(OPEN, 0.0, key="k", started=[])
    wait_token = ticket.token
    session, effects = registry.open(OPEN, 1.0, key="k", session_id=ticket.id, carried=ticket.lock)
    (created,) = decode(effects)
    assert created.session_created.session.id == ticket.id
    assert created.session_created.resume_token != wait_token
    session.detach(1, 2.0)  # before the client said anything
    request = pb.ResumeSession(session_id=ticket.id, resume_token=wait_token)
    resumed, generation, _ = registry.resume(request, 3.0, key="k")
    assert resumed is session and generation == 2 and session.state is State.ATTACHED


def test_the_wait_token_is_spent_once_the_client_spoke_on_the_created_stream() -> None:
    q = queue(capacity=1)
    registry = Registry(Limits(), ENGINE)
    ticket = q.arrive(OPEN, 0.0, key="", started=[])
    wait_token = ticket.token
    session, _ = registry.open(OPEN, 1.0, session_id=ticket.id, carried=ticket.lock)
    session.receive(1, pb.ConverseRequest(heartbeat=pb.Heartbeat()), 1.5)
    session.detach(1, 2.0)
    request = pb.ResumeSession(session_id=ticket.id, resume_token=wait_token)
    with pytest.raises(StreamRefused, match="session_resume_expired"):
        registry.resume(request, 3.0)


# -- fair room: key shares, class reserves, waits without a stream -------------------------


def test_a_wait_whose_stream_went_holds_its_place_but_not_room_in_the_queue() -> None:
    q = queue(capacity=1, max_length=2)
    first, second = (q.arrive(OPEN, 0.0, key="", started=[0.0]) for _ in range(2))
    with pytest.raises(StreamRefused, match="queue_full"):
        q.arrive(OPEN, 0.0, key="", started=[0.0])
    assert q.detach(first, first.generation, 1.0)
    third = q.arrive(OPEN, 1.0, key="", started=[0.0])  # the gone stream's room is free
    assert not third.granted
    assert q.order() == [second, third]  # and the gone one is passed over meanwhile
    resumed, _ = q.resume(first.id, first.token, key="")
    assert resumed is first and q.order() == [first, second, third]  # its place, kept


def test_waits_without_a_stream_stay_bounded_in_all() -> None:
    q = queue(capacity=1, max_length=1)
    for t in range(4):  # HELD_PER_ROOM waits held, each of whose stream went
        ticket = q.arrive(OPEN, float(t), key="", started=[0.0])
        assert q.detach(ticket, ticket.generation, float(t))
    with pytest.raises(StreamRefused, match="queue_full"):
        q.arrive(OPEN, 5.0, key="", started=[0.0])


def test_one_key_holds_at_most_its_share_of_the_queue() -> None:
    made = QueuePolicy(capacity=1, max_length=8, key_share=6)
    q = SessionQueue(made)
    for _ in range(6):
        q.arrive(OPEN, 0.0, key="key-a", started=[0.0])
    with pytest.raises(StreamRefused) as refused:
        q.arrive(OPEN, 0.0, key="key-a", started=[0.0])
    assert refused.value.code == "queue_full" and refused.value.retryable
    assert "share of the queue: limit=6" in refused.value.message
    other = q.arrive(OPEN, 0.0, key="key-b", started=[0.0])  # another key still finds room
    assert q.order()[-1] is other


def test_a_key_share_counts_its_waits_without_a_stream_in_the_bound_in_all() -> None:
    q = SessionQueue(QueuePolicy(capacity=1, max_length=8, key_share=1))
    for t in range(4):
        ticket = q.arrive(OPEN, float(t), key="key-a", started=[0.0])
        assert q.detach(ticket, ticket.generation, float(t))
    with pytest.raises(StreamRefused, match="share of the queue"):
        q.arrive(OPEN, 5.0, key="key-a", started=[0.0])


def test_room_is_kept_for_the_classes_above() -> None:
    q = queue(capacity=1, max_length=32)  # three classes: 2 places kept for each above
    assert q.policy.class_reserve == 2
    for _ in range(28):  # the default class (two classes above it) fills 32 - 2 * 2
        q.arrive(OPEN, 0.0, key="", started=[0.0])
    with pytest.raises(StreamRefused, match="queue_full"):
        q.arrive(OPEN, 0.0, key="", started=[0.0])
    q.arrive(OPEN, 0.0, key="silver-key", started=[0.0])  # silver: one class above it
    q.arrive(OPEN, 0.0, key="silver-key", started=[0.0])
    with pytest.raises(StreamRefused, match="queue_full"):
        q.arrive(OPEN, 0.0, key="silver-key", started=[0.0])
    gold = [q.arrive(OPEN, 0.0, key="gold-key", started=[0.0]) for _ in range(2)]
    assert q.order()[:2] == gold  # the highest class found room, and goes first


def test_a_queue_with_one_class_keeps_no_room() -> None:
    assert QueuePolicy(capacity=1, max_length=256).class_reserve == 0
