"""The queue of new sessions on a server at capacity, sans I/O: the time goes in, decisions out.

A server serves ``capacity`` sessions at once (what its engine carries, or less). A new session
beyond them waits here with its stream open instead of being refused: it is told its place and
an estimated wait, and it opens when it is admitted. Nothing here sleeps or reads a clock: the
server passes ``now`` and when each of its live sessions started, and carries out what comes
back (tickets admitted, notices to send, sessions that leave). The rules:

* **Room.** A session holds a place from its admission to its end. The places in use are the
  server's live sessions (adopted ones too) and the sessions admitted but not yet opened
  (``pending``). A new session that finds a free place while nobody waits with a stream is
  admitted at once and never shows in the queue.
* **Order.** A waiting session belongs to a priority class, chosen by its API key (a setting of
  the server; keys it does not name are in ``default``). Inside a class: first come, first
  served. Between classes the head of the highest class goes first, except that a head passed
  over ``max_overtakes`` times (each admission from another class while it heads its own is
  one) falls *due*, and due heads go first, in the order they fell due.
* **No starvation.** So a session at the head of its class (with its stream) is passed over at
  most ``max_overtakes + classes - 1`` times (:attr:`QueuePolicy.starvation_bound`): it is due
  after ``max_overtakes``, and then only the due heads of other classes that fell due before it
  go first, at most one per class. While a class has sessions waiting, it gets at least one in
  every ``starvation_bound + 1`` admissions.
* **Bounds.** At most ``max_length`` sessions wait with a stream (one more is refused
  ``queue_full``) and none waits longer than ``max_wait_s`` (refused ``queue_wait_exceeded``).
  Both are retryable, with the time until a place should free as the hint. A wait whose stream
  went holds its place but not room in the queue; so that such waits stay bounded too, at most
  ``HELD_PER_ROOM`` times ``max_length`` sessions are held in all.
* **Fair room.** No one fills the queue for the others. With a ``key_share`` (the tenant
  policy's ``queue_waits``, :mod:`omni_grpc.wire.tenant_policy`), one API key holds
  at most that many waits with a stream (and ``HELD_PER_ROOM`` times as many in all); one past
  it is refused ``queue_full``, naming the key's share. Room is kept for the classes above:
  a class may fill the queue only up to ``max_length`` less :attr:`QueuePolicy.class_reserve`
  for each class above it, so a session of a higher class always finds room while the lower
  ones wait.
* **Streams come and go.** A waiting session whose stream went keeps its place for the
  disconnect grace (``grace_s``), passed over meanwhile (it is in nobody's position), and takes
  it back when a resume brings its id and token; after the grace it has left. A resume while a
  stream waits takes the wait over. A session admitted while its stream went goes back to its
  place. The token is the wait's own: the session opens with one of its own.
* **Estimates.** The wait of each session comes from playing the queue forward: a live session
  ends after the mean of the lengths observed here that exceed its age (the last
  ``LENGTHS_KEPT`` sessions that ended; before any, twice the mean age of the live ones), and an
  admitted one lasts the mean length. Sessions of higher classes that will arrive meanwhile go
  first too: a class's wait is stretched by the share of places that the arrival rates of the
  classes above it leave it (the rates of the last ``ARRIVALS_KEPT`` arrivals of each class
  within ``RATE_WINDOW_S``), never below the no-starvation share, one admission in
  ``starvation_bound + 1``. A session whose wait would run out before its place is expected to
  leave then, and its place goes to the next one. A session is told its position and estimate
  when it joins (or comes back) and again when the position changes, or the estimate strays
  from the countdown of the last one told by more than ``max(RETELL_S, RETELL_SHARE of it)``.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import secrets
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean

from omni_grpc.core.credentials import SessionLock
from omni_grpc.core.errors import Status, StreamRefused
from omni_grpc.core.session import resume_refused
from omni_grpc.wire import pb
from omni_grpc.wire.tenant_policy import DEFAULT_CLASS

LENGTHS_KEPT = 64  # the session lengths the estimates learn from: the latest ones
MIN_LENGTH_S = 1.0  # no estimate assumes a session shorter than this
RETELL_S = 1.0  # an estimate is told again when it strays this far from the countdown...
RETELL_SHARE = 0.2  # ...or this share of the last one told, whichever is more
# Waits held in all (with a stream or within their grace) per wait with a stream allowed.
HELD_PER_ROOM = 4
ARRIVALS_KEPT = 64  # the arrivals of each class whose rate the estimates of lower ones use...
RATE_WINDOW_S = 120.0  # ...those of this long ago at most


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuePolicy:
    """How the queue admits: its room, its bounds, its classes (highest first)."""

    capacity: int
    max_length: int = 256
    max_wait_s: float = 120.0
    classes: tuple[str, ...] = (DEFAULT_CLASS,)
    max_overtakes: int = 4
    grace_s: float = 30.0  # how long a session whose stream went keeps its place
    retry_after_s: float = 1.0  # the least retry hint of a refusal
    key_share: int = 0  # the waits with a stream one API key may hold (0: no share of its own)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError("capacity must be at least 1")
        if self.max_length < 0 or self.max_wait_s <= 0 or self.grace_s < 0:
            raise ValueError("max_length, max_wait_s and grace_s must not be negative")
        if self.key_share < 0:
            raise ValueError("key_share must not be negative")
        if self.max_overtakes < 1:
            raise ValueError("max_overtakes must be at least 1")
        if DEFAULT_CLASS not in self.classes or len(set(self.classes)) != len(self.classes):
            raise ValueError(f"classes must be distinct and include {DEFAULT_CLASS!r}")

    @property
    def class_reserve(self) -> int:
        """The room in the queue kept for each class above a session's own (see the module):
        an eighth of the queue shared among the classes above the lowest (none for a queue too
        short to spare a place for each)."""
        if len(self.classes) < 2:
            return 0
        return self.max_length // (8 * (len(self.classes) - 1))

    @property
    def starvation_bound(self) -> int:
        """The most times a session at the head of its class is passed over."""
        return self.max_overtakes + len(self.classes) - 1


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class Ticket:
    """One session waiting for a place, or admitted and about to open."""

    __slots__ = (
        "attached",
        "detached_at",
        "due",
        "generation",
        "granted",
        "id",
        "joined_at",
        "klass",
        "lock",
        "order",
        "overtaken",
        "rank",
        "request",
        "told",
        "token",
    )

    def __init__(
        self, request: pb.OpenSession, *, klass: str, rank: int, key: str, now: float, order: int
    ) -> None:
        self.id = "sess_" + secrets.token_hex(16)  # the session's id, once it opens
        self.request = request
        self.klass = klass
        self.rank = rank
        self.lock = SessionLock(key)  # the wait's key and token, checked as a session's are
        # The wait's token in the clear until the first notice carries it, then "".
        self.token = self.lock.resume.issue()
        self.joined_at = now
        self.order = order  # the arrival's number: first come, first served inside a class
        self.generation = 1  # of the stream that waits; a resume makes the next
        self.attached = True
        self.detached_at: float | None = None
        self.granted = False
        self.overtaken = 0  # admissions of other classes while this one headed its own
        self.due: int | None = None  # the admission count at which it fell due
        self.told: tuple[int, float, float] | None = None  # position, estimate, when

    def __repr__(self) -> str:
        state = "granted" if self.granted else "attached" if self.attached else "detached"
        return f"Ticket({self.id}, {self.klass}, {state}, generation={self.generation})"


@dataclass(frozen=True, slots=True)
class Leaving:
    """A waiting session that left the queue without a place, and why: ``queue_wait_exceeded``
    (with the refusal its stream ends with, when it has one) or ``grace_lapsed``."""

    ticket: Ticket
    reason: str
    refusal: StreamRefused | None = None


class SessionQueue:
    """The sessions waiting for room on one server, and the rules they wait by (see the module)."""

    def __init__(self, policy: QueuePolicy, key_classes: Mapping[str, str] | None = None) -> None:
        self.policy = policy
        unknown = set((key_classes or {}).values()) - set(policy.classes)
        if unknown:
            raise ValueError(f"keys in unknown classes: {sorted(unknown)}")
        # Keys are kept as digests, as sessions keep them.
        self._key_classes = {_digest(key): name for key, name in (key_classes or {}).items()}
        self._ranks = {name: rank for rank, name in enumerate(policy.classes)}
        self._waiting: list[list[Ticket]] = [[] for _ in policy.classes]  # by rank, in order
        self._tickets: dict[str, Ticket] = {}  # waiting and admitted-not-opened, by id
        self.pending = 0  # admitted, not yet opened
        self._lengths: deque[float] = deque(maxlen=LENGTHS_KEPT)
        self._admitted = 0  # admissions from the queue so far: the clock of "due"
        self._arrivals = 0
        # When the latest sessions of each class arrived (for the rates of higher classes).
        self._arrived: list[deque[float]] = [deque(maxlen=ARRIVALS_KEPT) for _ in policy.classes]
        self._decoy = SessionLock.decoy()  # checked in place of an unknown wait's lock
        # This server's routing key, told to waiting clients: their resume must come here.
        self.route = ""

    def __len__(self) -> int:
        """Sessions holding a place in the queue, with or without a stream."""
        return sum(len(waiting) for waiting in self._waiting)

    def holds(self, session_id: str) -> bool:
        """Whether ``session_id`` names a session waiting here (or admitted, not yet open)."""
        return session_id in self._tickets

    def class_of(self, key: str) -> str:
        """The priority class of API ``key``."""
        return self._key_classes.get(_digest(key), DEFAULT_CLASS)

    def waiting(self) -> dict[str, tuple[int, int]]:
        """By class: the sessions waiting with a stream, and those waiting without one."""
        counts = {}
        for name, waiting in zip(self.policy.classes, self._waiting, strict=True):
            attached = sum(ticket.attached for ticket in waiting)
            counts[name] = (attached, len(waiting) - attached)
        return counts

    # -- arrivals and admissions -----------------------------------------------------------

    def arrive(
        self, request: pb.OpenSession, now: float, *, key: str, started: Sequence[float]
    ) -> Ticket:
        """A new session: admitted at once (``granted``) when a place is free and nobody waits
        with a stream, else queued. ``started`` says when each live session started.

        Raises StreamRefused (``queue_full``) when it would wait and the queue is full.
        """
        klass = self.class_of(key)
        self._arrivals += 1
        ticket = Ticket(
            request, klass=klass, rank=self._ranks[klass], key=key, now=now, order=self._arrivals
        )
        self._arrived[ticket.rank].append(now)
        room = len(started) + self.pending < self.policy.capacity
        if room and not any(t.attached for waiting in self._waiting for t in waiting):
            ticket.granted = True
            self.pending += 1
        elif (full := self._no_room(ticket)) is not None:
            raise StreamRefused(
                Status.RESOURCE_EXHAUSTED,
                "queue_full",
                f"the server is at capacity and {full}: retry later",
                retryable=True,
                retry_after_s=self.retry_after_s(now, started),
            )
        else:
            self._waiting[ticket.rank].append(ticket)
        self._tickets[ticket.id] = ticket
        return ticket

    def _no_room(self, ticket: Ticket) -> str | None:
        """Why ``ticket`` may not wait (see "Bounds" and "Fair room"), or None when it may."""
        policy = self.policy
        held = [t for waiting in self._waiting for t in waiting]
        with_stream = sum(t.attached for t in held)
        room = policy.max_length - ticket.rank * policy.class_reserve
        if with_stream >= room or len(held) >= HELD_PER_ROOM * policy.max_length:
            return f"{with_stream} sessions wait"
        if policy.key_share:
            owner = ticket.lock.owner_digest
            own = [t for t in held if t.lock.owner_digest == owner]
            attached = sum(t.attached for t in own)
            if attached >= policy.key_share or len(own) >= HELD_PER_ROOM * policy.key_share:
                return f"this API key holds its share of the queue: limit={policy.key_share}"
        return None

    def grant(self, live: int) -> list[Ticket]:
        """Admits waiting sessions into the free places (``live`` sessions hold some)."""
        room = self.policy.capacity - live - self.pending
        if room <= 0:
            return []
        order, overtaken, due = self._schedule(room)
        for ticket, count in overtaken.items():
            ticket.overtaken = count
        for ticket, when in due.items():
            ticket.due = when
        for ticket in order:
            self._waiting[ticket.rank].remove(ticket)
            ticket.granted = True
        self.pending += len(order)
        self._admitted += len(order)
        return order

    def opened(self, ticket: Ticket, now: float) -> float:
        """The admitted session opened (or failed to): its place is the server's now.
        Returns how long it waited."""
        if self._tickets.get(ticket.id) is ticket:
            del self._tickets[ticket.id]
            if ticket.granted:
                self.pending -= 1
        return now - ticket.joined_at

    def ended(self, held_s: float) -> None:
        """A session ended after holding its place ``held_s``: a length to learn from."""
        self._lengths.append(held_s)

    # -- streams ---------------------------------------------------------------------------

    def detach(self, ticket: Ticket, generation: int, now: float) -> bool:
        """The waiting stream of ``generation`` went: the session keeps its place for the
        grace (an admitted one goes back to it). False if that stream no longer waited."""
        if (
            self._tickets.get(ticket.id) is not ticket
            or ticket.generation != generation
            or not ticket.attached
        ):
            return False
        ticket.attached, ticket.detached_at, ticket.told = False, now, None
        if ticket.granted:
            ticket.granted = False
            self.pending -= 1
            waiting = self._waiting[ticket.rank]
            waiting.insert(bisect.bisect([t.order for t in waiting], ticket.order), ticket)
        return True

    def resume(self, session_id: str, token: str, *, key: str) -> tuple[Ticket, int | None]:
        """A new stream for a waiting session; returns it and the generation of the stream it
        takes the wait over from (None when none waited).

        Raises StreamRefused as for an unknown session (the same answer, after the same
        checks) for an unknown id, another key or a wrong token.
        """
        ticket = self._tickets.get(session_id)
        lock = self._decoy if ticket is None else ticket.lock
        if not lock.opens(key, token, attached=False) or ticket is None:
            raise resume_refused()
        replaced = ticket.generation if ticket.attached else None
        ticket.generation += 1
        ticket.attached, ticket.detached_at, ticket.told = True, None, None
        return ticket, replaced

    # -- time ------------------------------------------------------------------------------

    def tick(self, now: float, started: Sequence[float]) -> list[Leaving]:
        """Lets go of the sessions that waited their longest, or whose grace lapsed."""
        leaving = []
        for waiting in self._waiting:
            for ticket in list(waiting):
                if now - ticket.joined_at >= self.policy.max_wait_s:
                    refusal = None
                    if ticket.attached:
                        refusal = StreamRefused(
                            Status.RESOURCE_EXHAUSTED,
                            "queue_wait_exceeded",
                            f"the session waited {self.policy.max_wait_s:g} s for room: retry "
                            "later",
                            retryable=True,
                            retry_after_s=self.retry_after_s(now, started),
                        )
                    leaving.append(Leaving(ticket, "queue_wait_exceeded", refusal))
                elif ticket.detached_at is not None and (
                    now - ticket.detached_at >= self.policy.grace_s
                ):
                    leaving.append(Leaving(ticket, "grace_lapsed"))
                else:
                    continue
                waiting.remove(ticket)
                del self._tickets[ticket.id]
        return leaving

    def next_deadline(self) -> float | None:
        """The earliest time at which :meth:`tick` may let a session go."""
        deadlines = [
            ticket.joined_at + self.policy.max_wait_s
            if ticket.detached_at is None
            else min(
                ticket.joined_at + self.policy.max_wait_s,
                ticket.detached_at + self.policy.grace_s,
            )
            for waiting in self._waiting
            for ticket in waiting
        ]
        return min(deadlines, default=None)

    def drain(self) -> list[Ticket]:
        """Lets every waiting session go (the server stops taking sessions); returns them."""
        gone = [ticket for waiting in self._waiting for ticket in waiting]
        for waiting in self._waiting:
            waiting.clear()
        for ticket in gone:
            del self._tickets[ticket.id]
        return gone

    # -- what the waiting are told ---------------------------------------------------------

    def order(self) -> list[Ticket]:
        """The sessions waiting with a stream, in the order they would be admitted if nobody
        else came: position 1 first."""
        return self._schedule(None)[0]

    def estimates(self, now: float, started: Sequence[float]) -> list[tuple[Ticket, float]]:
        """Each session of :meth:`order` with its estimated wait in seconds."""
        order = self.order()
        mean = self._mean_length(now, started)
        ends = self._ends(now, started, mean)
        shares = self._shares(now, mean)
        waits, at = [], now
        for ticket in order:
            while len(ends) >= self.policy.capacity:
                at = max(at, heapq.heappop(ends))
            wait = (at - now) / shares[ticket.rank]
            waits.append((ticket, wait))
            if now + wait < ticket.joined_at + self.policy.max_wait_s:
                heapq.heappush(ends, at + mean)
            # else its wait runs out first: it leaves, and the place goes to the next
        return waits

    def notices(self, now: float, started: Sequence[float]) -> list[tuple[Ticket, bytes]]:
        """The ``session_queued`` events due: for each session waiting with a stream whose
        position or estimate changed enough since it was last told (see the module)."""
        due = []
        for position, (ticket, estimate) in enumerate(self.estimates(now, started), 1):
            if ticket.told is not None:
                told_position, told_estimate, told_at = ticket.told
                countdown = told_estimate - (now - told_at)
                strayed = abs(estimate - countdown) > max(RETELL_S, RETELL_SHARE * told_estimate)
                if position == told_position and not strayed:
                    continue
            ticket.told = (position, estimate, now)
            due.append((ticket, self._notice(ticket, position, estimate)))
        return due

    def retry_after_s(self, now: float, started: Sequence[float]) -> float:
        """When a place should free (the hint of a refusal), at least the policy's least."""
        ends = self._ends(now, started, self._mean_length(now, started))
        over = len(ends) - self.policy.capacity  # places to free before one is free
        first = heapq.nsmallest(over + 1, ends)[-1] - now if over >= 0 else 0.0
        return max(self.policy.retry_after_s, first)

    # -- inside ----------------------------------------------------------------------------

    def _schedule(
        self, limit: int | None
    ) -> tuple[list[Ticket], dict[Ticket, int], dict[Ticket, int]]:
        """The first ``limit`` (None: all) sessions waiting with a stream in admission order,
        with the overtake counts and due marks that order leaves behind."""
        queues = [deque(t for t in waiting if t.attached) for waiting in self._waiting]
        overtaken: dict[Ticket, int] = {}
        due: dict[Ticket, int] = {}
        admitted = self._admitted
        order: list[Ticket] = []
        while limit is None or len(order) < limit:
            heads = [queue[0] for queue in queues if queue]
            if not heads:
                break
            fallen = [(due.get(h, h.due), h.rank, h) for h in heads if due.get(h, h.due)]
            pick = min(fallen)[2] if fallen else heads[0]  # heads go highest class first
            order.append(pick)
            admitted += 1
            queues[pick.rank].popleft()
            for head in heads:
                if head is not pick:
                    overtaken[head] = count = overtaken.get(head, head.overtaken) + 1
                    if count >= self.policy.max_overtakes and not due.get(head, head.due):
                        due[head] = admitted
        return order, overtaken, due

    def _mean_length(self, now: float, started: Sequence[float]) -> float:
        if self._lengths:
            return max(MIN_LENGTH_S, fmean(self._lengths))
        ages = [now - start for start in started]
        return max(MIN_LENGTH_S, 2 * fmean(ages)) if ages else MIN_LENGTH_S

    def _shares(self, now: float, mean: float) -> list[float]:
        """By rank: the share of admissions the arrivals of the classes above leave a class."""
        least = 1 / (self.policy.starvation_bound + 1)
        shares, taken = [], 0.0
        for arrived in self._arrived:
            shares.append(max(1 - taken, least))
            recent = [at for at in arrived if now - at <= RATE_WINDOW_S]
            if len(recent) >= 2 and now > recent[0]:
                taken += len(recent) / (now - recent[0]) * mean / self.policy.capacity
        return shares

    def _remaining(self, age: float, mean: float) -> float:
        """The expected rest of a session ``age`` old: the mean excess of the observed lengths
        that exceed it (half the mean length when it outlived them all)."""
        lengths: Iterable[float] = self._lengths or (mean,)
        longer = [length - age for length in lengths if length > age]
        return fmean(longer) if longer else mean / 2

    def _ends(self, now: float, started: Sequence[float], mean: float) -> list[float]:
        """When each place in use should free, as a heap."""
        ends = [now + self._remaining(now - start, mean) for start in started]
        ends += [now + mean] * self.pending
        heapq.heapify(ends)
        return ends

    def _notice(self, ticket: Ticket, position: int, estimate: float) -> bytes:
        body = pb.SessionQueued(
            session_id=ticket.id,
            resume_token=ticket.token,
            position=position,
            priority_class=ticket.klass,
            route=self.route,
        )
        ticket.token = ""  # the first notice carries it; a resumed stream has it already
        body.estimated_wait.FromMilliseconds(round(estimate * 1000))
        return pb.ConverseResponse(session_queued=body).SerializeToString()


__all__ = ["DEFAULT_CLASS", "Leaving", "QueuePolicy", "SessionQueue", "Ticket"]
