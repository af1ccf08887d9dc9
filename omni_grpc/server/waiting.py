"""The waiting room: new sessions of a server at capacity wait here, their streams open.

The rules are the core's (:mod:`omni_grpc.core.session_queue`); this is their asyncio side. A
session that must wait parks its stream's task here and is told, through its transport's
``tell``, its place and estimated wait as they change (``session_queued``); it is woken when it
is admitted, when it waited its longest, when another stream takes its wait over, and when the
server drains. :meth:`omni_grpc.server.sessions.Sessions.open` is the one caller, so every
transport (Converse, ConverseMany's streams, an in-process bridge) waits the same way. The
sessions say when room frees (:meth:`WaitingRoom.freed`) and their expiry timer moves the
queue on (:meth:`WaitingRoom.tick`), both on the server's one clock.

A stream whose task is cancelled while it waits (the client went, or its connection) leaves the
queue; its place is kept for the disconnect grace, for a resume of the wait. A client that does
not take a notice within ``TELL_TIMEOUT_S`` is cut the same way (``slow_consumer``).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from omni_grpc.core import Registry, Session, Status, StreamRefused
from omni_grpc.core.limits import Limits
from omni_grpc.core.session_queue import DEFAULT_CLASS, QueuePolicy, SessionQueue, Ticket
from omni_grpc.server.settings import QueueSettings
from omni_grpc.wire import pb
from omni_grpc.wire.tenant_policy import TenantPolicy

logger = logging.getLogger(__name__)

# How a stream is told something while it waits: its transport's write (or a no-op).
Tell = Callable[[bytes], Awaitable[None]]
TELL_TIMEOUT_S = 10.0
SLOW_WAITER = StreamRefused(
    Status.RESOURCE_EXHAUSTED,
    "slow_consumer",
    "the client did not read while it waited; resume the wait to keep its place",
    retryable=True,
)
WAIT_BUCKETS_S = (0.0, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

ADMITTED = Counter(
    "omni_grpc_queue_admitted",
    "New sessions admitted, by priority class and way: at_once (a place was free) or "
    "after_wait (from the queue).",
    ["priority_class", "way"],
)
REFUSED = Counter(
    "omni_grpc_queue_refused",
    "New sessions refused at capacity, by priority class and reason: queue_full, "
    "queue_wait_exceeded, server_shutting_down.",
    ["priority_class", "reason"],
)
LEFT = Counter(
    "omni_grpc_queue_left",
    "Waiting sessions whose stream went and that did not come back within the grace.",
    ["priority_class"],
)
WAITED = Histogram(
    "omni_grpc_queue_wait_seconds",
    "How long each admitted session waited for its place (0 when one was free).",
    ["priority_class"],
    buckets=WAIT_BUCKETS_S,
)


def queue_capacity(chosen: QueueSettings, limits: Limits, engine_capacity: int) -> int:
    """The sessions a server with the queue ``chosen`` serves at once: the engine's
    (``engine_capacity``; 0 when it knows none), or less when ``chosen`` says less, and never
    more than ``max_sessions``."""
    known = [capacity for capacity in (chosen.capacity, engine_capacity) if capacity > 0]
    return min(*known, limits.max_sessions) if known else limits.max_sessions


def session_queue(
    chosen: QueueSettings,
    limits: Limits,
    engine_capacity: int,
    tenants: TenantPolicy | None = None,
) -> SessionQueue:
    """The queue ``chosen`` asks for, of :func:`queue_capacity`; each key holds at most the
    ``tenants`` policy's share of its waits, in the class the policy gives it (None: no
    shares, every key in ``DEFAULT_CLASS``)."""
    tenants = tenants if tenants is not None else TenantPolicy()
    names = [name for name, _ in chosen.classes]
    if DEFAULT_CLASS not in names:
        names.append(DEFAULT_CLASS)
    policy = QueuePolicy(
        capacity=queue_capacity(chosen, limits, engine_capacity),
        max_length=chosen.max_length,
        max_wait_s=chosen.max_wait_s,
        classes=tuple(names),
        max_overtakes=chosen.max_overtakes,
        grace_s=limits.disconnect_grace_s,
        retry_after_s=limits.open_retry_after_s,
        key_share=tenants.queue_waits,
    )
    return SessionQueue(policy, tenants.key_classes())


async def told_nobody(payload: bytes) -> None:
    """The ``tell`` of a caller with no stream to tell (notices are dropped)."""


class WaitEnded(Exception):
    """A wait another stream took over: this stream was told ``session_replaced`` and ends."""


class _Waiter:
    """The stream that waits for one ticket: what it is to be told, and its wake-up."""

    __slots__ = ("generation", "notice", "refusal", "wake")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.notice: bytes | None = None  # the latest session_queued not yet told
        self.refusal: StreamRefused | None = None
        self.wake = asyncio.Event()


class WaitingRoom:
    """The queue of one server's new sessions, and the streams that wait in it."""

    def __init__(self, queue: SessionQueue, registry: Registry, clock: Callable[[], float]) -> None:
        self.queue = queue
        self._registry = registry
        self._clock = clock
        self._waiters: dict[str, _Waiter] = {}
        QUEUE_GAUGES.watch(self)

    @property
    def capacity(self) -> int:
        return self.queue.policy.capacity

    def free(self) -> int:
        """Places free now (none while someone waits for one)."""
        return max(0, self.capacity - len(self._registry) - self.queue.pending)

    def holds(self, session_id: str) -> bool:
        """Whether ``session_id`` names a session waiting here."""
        return self.queue.holds(session_id)

    # -- waiting ---------------------------------------------------------------------------

    async def admit(self, request: pb.OpenSession, key: str, tell: Tell) -> Ticket:
        """A place for a new session, at once or after a wait told through ``tell``.

        Raises StreamRefused when the queue is full, the wait runs out or the server drains.
        """
        klass = self.queue.class_of(key)
        try:
            ticket = self.queue.arrive(request, self._clock(), key=key, started=self._started())
        except StreamRefused as refusal:
            REFUSED.labels(klass, refusal.code).inc()
            raise
        if ticket.granted:
            ADMITTED.labels(klass, "at_once").inc()
            return ticket
        return await self._wait(ticket, tell)

    async def resume(self, request: pb.ResumeSession, key: str, tell: Tell) -> Ticket:
        """Takes a waiting session's place back for a new stream (or takes its wait over);
        raises StreamRefused (as for an unknown session) without its key and token."""
        ticket, replaced = self.queue.resume(request.session_id, request.resume_token, key=key)
        if replaced is not None and (old := self._waiters.get(ticket.id)) is not None:
            old.wake.set()  # it sees the new generation, says session_replaced and ends
        logger.info(
            "session %s: its wait resumed (generation %d)",
            ticket.id,
            ticket.generation,
            extra={"session_id": ticket.id},
        )
        return await self._wait(ticket, tell)

    async def _wait(self, ticket: Ticket, tell: Tell) -> Ticket:
        generation = ticket.generation
        waiter = self._waiters[ticket.id] = _Waiter(generation)
        admitted = False
        self.freed()  # admits it if it may go now, and tells everyone who moved (it too)
        try:
            while True:
                if ticket.generation != generation:
                    replaced = pb.SessionReplaced(
                        session_id=ticket.id, attachment_generation=generation
                    )
                    payload = pb.ConverseResponse(session_replaced=replaced)
                    await asyncio.wait_for(tell(payload.SerializeToString()), TELL_TIMEOUT_S)
                    raise WaitEnded()
                if waiter.refusal is not None:
                    raise waiter.refusal
                if ticket.granted:
                    admitted = True
                    ADMITTED.labels(ticket.klass, "after_wait").inc()
                    return ticket
                if (notice := waiter.notice) is not None:
                    waiter.notice = None
                    await asyncio.wait_for(tell(notice), TELL_TIMEOUT_S)
                    continue
                waiter.wake.clear()
                await waiter.wake.wait()
        except TimeoutError:
            raise SLOW_WAITER from None
        finally:
            if self._waiters.get(ticket.id) is waiter:
                del self._waiters[ticket.id]
            # The stream went without its place (cancelled, cut, refused): kept for the grace.
            if not admitted and self.queue.detach(ticket, generation, self._clock()):
                logger.info(
                    "session %s: its stream left the queue",
                    ticket.id,
                    extra={"session_id": ticket.id},
                )
                self.freed()

    def opened(self, ticket: Ticket) -> None:
        """The admitted session opened, or failed to: its place is the server's now."""
        WAITED.labels(ticket.klass).observe(self.queue.opened(ticket, self._clock()))

    # -- what moves the queue --------------------------------------------------------------

    def freed(self, ended: Session | None = None) -> None:
        """Room may have changed (a session ended, ``ended`` when it ran its course here, or
        one left, or the queue moved): admits whom it can and tells whoever moved."""
        now = self._clock()
        if ended is not None:
            self.queue.ended(now - ended.opened_at)
        if not self._registry.accepting:
            return
        for ticket in self.queue.grant(len(self._registry)):
            self._wake(ticket.id)
        for ticket, payload in self.queue.notices(now, self._started()):
            if (waiter := self._waiters.get(ticket.id)) is not None:
                waiter.notice = payload
                waiter.wake.set()

    def tick(self) -> None:
        """Lets go of waits that ran out or lapsed, and tells estimates that strayed."""
        for leaving in self.queue.tick(self._clock(), self._started()):
            ticket = leaving.ticket
            if leaving.reason == "grace_lapsed":
                LEFT.labels(ticket.klass).inc()
                continue
            REFUSED.labels(ticket.klass, leaving.reason).inc()
            if leaving.refusal is not None and (waiter := self._waiters.get(ticket.id)):
                waiter.refusal = leaving.refusal
                waiter.wake.set()
        self.freed()

    def drain(self) -> None:
        """The server stops taking sessions: every wait ends ``server_shutting_down``."""
        refusal = self._registry.draining_refusal()
        for ticket in self.queue.drain():
            REFUSED.labels(ticket.klass, refusal.code).inc()
            if (waiter := self._waiters.get(ticket.id)) is not None:
                waiter.refusal = refusal
                waiter.wake.set()

    def _wake(self, session_id: str) -> None:
        if (waiter := self._waiters.get(session_id)) is not None:
            waiter.wake.set()

    def _started(self) -> list[float]:
        return [session.opened_at for session in self._registry]


class QueueGauges(Collector):
    """The queues of every live server in the process, read at scrape time: sessions waiting
    with and without a stream by class, the capacity, and the places free."""

    def __init__(self) -> None:
        self._rooms: weakref.WeakSet[WaitingRoom] = weakref.WeakSet()

    def watch(self, room: WaitingRoom) -> None:
        self._rooms.add(room)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        length = GaugeMetricFamily(
            "omni_grpc_queue_length",
            "New sessions waiting for a place with their stream open, by priority class.",
            labels=["priority_class"],
        )
        away = GaugeMetricFamily(
            "omni_grpc_queue_away",
            "Waiting sessions whose stream went, keeping their place for the grace.",
            labels=["priority_class"],
        )
        counts: dict[str, list[int]] = {}
        capacity = free = 0
        for room in list(self._rooms):
            for name, (attached, detached) in room.queue.waiting().items():
                total = counts.setdefault(name, [0, 0])
                total[0] += attached
                total[1] += detached
            capacity += room.capacity
            free += room.free()
        for name, (attached, detached) in counts.items():
            length.add_metric([name], attached)
            away.add_metric([name], detached)
        yield length
        yield away
        yield GaugeMetricFamily(
            "omni_grpc_capacity", "Sessions served at once before new ones wait.", capacity
        )
        yield GaugeMetricFamily("omni_grpc_capacity_free", "Places free now.", free)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []  # computed at scrape time only


# The one collector of the process, registered when a server with a queue starts.
QUEUE_GAUGES = QueueGauges()


__all__ = [
    "QUEUE_GAUGES",
    "TELL_TIMEOUT_S",
    "Tell",
    "WaitEnded",
    "WaitingRoom",
    "session_queue",
    "told_nobody",
]
