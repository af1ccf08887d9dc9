"""Every session one server hosts: opening and resuming them, expiring them on time, draining.

:class:`Sessions` owns the core :class:`Registry`, the engine, and one :class:`SessionHost` per
live session. It reads the one clock of the whole server, injected so that tests move time
instead of sleeping: the registry, the hosts and the expiry timer all see the same ``now``. The
servicer only asks it for a stream's :class:`SendQueue` when a stream starts (``open`` or
``resume``) and hands the queue back when the stream ends (``release``). With a capacity, a
new session past it waits for a place in the :class:`~.waiting.WaitingRoom` before it opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence

from opentelemetry.trace import Tracer

from omni_grpc.core import Effects, Registry, Session, State, StreamRefused
from omni_grpc.core.credentials import SessionLock
from omni_grpc.core.errors import Status
from omni_grpc.core.key_shares import KeyShares
from omni_grpc.core.rate_limits import KeyAllowances
from omni_grpc.core.session import resume_refused
from omni_grpc.core.session_queue import SessionQueue, Ticket
from omni_grpc.core.snapshot import adopt, check_adopted_cursor
from omni_grpc.engine.base import Engine, EngineSession
from omni_grpc.server import fault_hook, metrics
from omni_grpc.server.durable import ADOPTIONS, MOVED, DurableStore, StoreUnavailable
from omni_grpc.server.host import SendQueue, SessionHost
from omni_grpc.server.recording import Recorder
from omni_grpc.server.recording.recorder import RecordOnRequest
from omni_grpc.server.refusals import RefusalLog
from omni_grpc.server.session_gauges import SESSION_GAUGES
from omni_grpc.server.taps import DurableTap, TurnMetrics
from omni_grpc.server.tracing import TurnTraces
from omni_grpc.server.waiting import Tell, WaitingRoom, told_nobody
from omni_grpc.wire import pb
from omni_grpc.wire.keys import key_label
from omni_grpc.wire.tenant_policy import TenantPolicy

logger = logging.getLogger(__name__)

# The expiry timer sleeps until the next deadline, but at most this long (in clock seconds),
# so it sees deadlines that appear while it sleeps and a clock that tests move by hand.
MAX_TIMER_SLEEP_S = 0.5
MIN_TIMER_SLEEP_S = 0.005
# A resume that reached a replica while the session's owner still lives (or still hands it
# over) is asked to come back after this long; the proxy takes the retry to the owner.
ELSEWHERE_RETRY_S = 0.25
# A resume that needs the session store while it is away is asked to come back after this long.
STORE_AWAY_RETRY_S = 0.5


class SessionElsewhere(StreamRefused):
    """A resume that reached a replica the session does not live on; ``route`` names the
    owner's, when it is known and alive, so the client's retry goes there."""

    def __init__(self, message: str, route: str = "") -> None:
        super().__init__(
            Status.UNAVAILABLE,
            "session_elsewhere",
            message,
            retryable=True,
            retry_after_s=ELSEWHERE_RETRY_S,
        )
        self.route = route


class SessionStoreAway(StreamRefused):
    """A resume of a session this replica does not hold, while the session store (Redis) does
    not answer: a peer may have written it there, so the client is told to retry, never that
    the session is unknown (which would end it for good)."""

    def __init__(self) -> None:
        super().__init__(
            Status.UNAVAILABLE,
            "session_store_unavailable",
            "the session store is away, so where the session lives is unknown: retry",
            retryable=True,
            retry_after_s=STORE_AWAY_RETRY_S,
        )


class ResumeFoundEnded(Exception):
    """A resume found its session ended; ``effects`` replay what the client missed."""

    def __init__(self, effects: Effects) -> None:
        super().__init__("the session has ended")
        self.effects = effects


class Sessions:
    """The hosts of every live session, over one registry, one engine and one clock."""

    def __init__(
        self,
        registry: Registry,
        engine: Engine,
        clock: Callable[[], float],
        *,
        api_keys: Sequence[str] = (),
        tenants: TenantPolicy | None = None,
        tracer: Tracer | None = None,
        store: DurableStore | None = None,
        queue: SessionQueue | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self.registry = registry
        self.engine = engine
        self.clock = clock
        # What one API key gets (omni_grpc/wire/tenant_policy.py); the server's, derived from
        # its settings, or without one (no keys) no shares and the default rates.
        self.tenants = tenants if tenants is not None else TenantPolicy()
        # The rate allowance of each API key, shared by every session it opens or resumes.
        self._key_allowances = KeyAllowances(tuple(api_keys), self.tenants, clock())
        # What each key may hold and start: sessions, memory, opens and resumes (key_shares.py).
        retry_after_s = registry.limits.open_retry_after_s
        self.key_shares = KeyShares(tuple(api_keys), self.tenants, clock(), retry_after_s)
        # Input audio and queued output of every session together (see core/budget.py).
        self.budget = registry.budget
        # Refused streams and lookups, whichever transport they came by (see refusals.py).
        self.refusals = RefusalLog(clock)
        self._hosts: dict[str, SessionHost] = {}
        # Set whenever a stream lets go of its session, so a drain can wait for the last one.
        self._released = asyncio.Event()
        self._tracer = tracer  # None: tracing is off, and no session pays for it
        self.store = store  # None: durability off, sessions live in this process only
        self._handovers: set[asyncio.Task[None]] = set()
        self._adopting: set[str] = set()  # ids being adopted here now (one adoption at a time)
        if store is not None:
            store.on_fenced = self._moved
        # New sessions past capacity wait here (waiting.py); None: refused past max_sessions.
        self.waiting = WaitingRoom(queue, registry, clock) if queue is not None else None
        self.recorder = recorder  # None: recording off, and no session pays for it
        SESSION_GAUGES.watch(self)  # attached and detached, counted at scrape time

    def __iter__(self) -> Iterator[SessionHost]:
        return iter(list(self._hosts.values()))

    # -- streams start and end -------------------------------------------------------------

    async def open(
        self, request: pb.OpenSession, key: str = "", tell: Tell = told_nobody
    ) -> tuple[SessionHost, SendQueue]:
        """Creates a session and its engine session; raises StreamRefused when it cannot.

        ``key`` is the API key the stream presented: the session is bound to it, and its
        commands count against it. A key past its share of sessions, or opening too fast, is
        refused first (see core/key_shares.py). At capacity (a server with a queue) the session
        then waits for a place, its stream told ``session_queued`` through ``tell``; a bad
        configuration or a drain is refused before any wait.
        """
        self.key_shares.admit_open(key, self.held_by(key), self.clock())
        ticket = None
        if self.waiting is not None:
            self.registry.check_open(request)
            ticket = await self.waiting.admit(request, key, tell)
        return await self._open(request, key, ticket)

    async def _open(
        self, request: pb.OpenSession, key: str, ticket: Ticket | None
    ) -> tuple[SessionHost, SendQueue]:
        try:
            session, effects = self.registry.open(
                request,
                self.clock(),
                key=key,
                session_id=ticket.id if ticket is not None else "",
                carried=ticket.lock if ticket is not None else None,
            )
        finally:
            if ticket is not None and self.waiting is not None:
                self.waiting.opened(ticket)  # the place is the registry's now (or free again)
        session.throttle.key = self._key_allowances.get(key)
        session.admission.hold_for_key(self.key_shares.budget(key))
        try:
            engine_session = await self.engine.open_session(session.id, session.config)
        except Exception:
            logger.exception(
                "session %s: the engine could not open it",
                session.id,
                extra={"session_id": session.id},
            )
            self.registry.discard(session)
            self._freed()
            raise StreamRefused(
                Status.UNAVAILABLE,
                "engine_error",
                "the engine could not open a session",
                retryable=True,
                retry_after_s=1.0,
            ) from None
        host = self._host(session, engine_session)
        queue = host.attach(1)
        host.deliver(effects)
        metrics.SESSIONS_OPENED.inc()
        logger.info("session %s opened", session.id, extra={"session_id": session.id})
        return host, queue

    def key_label(self, key: str) -> str:
        """What ``key`` is counted under in metrics: its hash for a key of the server's, else
        ``none`` (a key no one configured is the client's text)."""
        return key_label(key) if self.key_shares.digest(key) is not None else "none"

    def held_by(self, key: str) -> int:
        """The live sessions of ``key`` (0 for a key the server does not have)."""
        digest = self.key_shares.digest(key)
        if digest is None:
            return 0
        return sum(1 for session in self.registry if session.lock.owner_digest == digest)

    def _host(
        self, session: Session, engine_session: EngineSession, *, epoch: int = 1
    ) -> SessionHost:
        host = SessionHost(session, engine_session, self._forget, self.clock)
        host.taps.add(TurnMetrics())
        if self._tracer is not None:
            turns = TurnTraces(self._tracer, session.id)
            engine_session.on_stage = turns.stage
            host.taps.add(turns)
        if self.store is not None:
            host.taps.add(DurableTap(self.store, host))
        if (fault := fault_hook.armed(adopted=epoch > 1)) is not None:
            host.taps.add(fault)  # a test hook, off unless set (fault_hook.py)
        self._hosts[session.id] = host
        if self.recorder is not None:
            # An adopted session's recording is the next part of the one begun elsewhere.
            self.recorder.consider(host, started_by="adopted" if epoch > 1 else "open", part=epoch)
            if session.recording == "on-request":
                host.taps.add(RecordOnRequest(self.recorder))
        return host

    async def resume(
        self, request: pb.ResumeSession, key: str = "", tell: Tell = told_nobody
    ) -> tuple[SessionHost, SendQueue]:
        """Reattaches a session to a new stream, adopting it from the store when its owner
        is gone (durability on); a session still waiting for a place takes its place back and
        waits on (told through ``tell``), and opens when admitted.

        Raises StreamRefused or ResumeGap when it cannot, and ResumeFoundEnded (with the events the
        client missed, the ending included) when the session ended since.
        """
        self.key_shares.admit_resume(key, self.clock())  # before any work: a flood costs little
        if self.waiting is not None and self.waiting.holds(request.session_id):
            ticket = await self.waiting.resume(request, key, tell)
            return await self._open(ticket.request, key, ticket)
        if self.store is not None:
            if not self.registry.accepting:
                # Draining: this replica hands its sessions over; the retry finds a peer.
                raise SessionElsewhere("this replica is draining; the session moves to a peer")
            if request.session_id in self._adopting:
                raise SessionElsewhere("the session is being adopted here; retry")
            if not self.registry.knows(request.session_id):
                self._adopting.add(request.session_id)
                try:
                    await self._adopt(request, key)
                except StoreUnavailable:
                    raise SessionStoreAway() from None
                finally:
                    self._adopting.discard(request.session_id)
        # A resume while a stream is attached takes the session over (counted apart).
        known = self._hosts.get(request.session_id)
        takeover = known is not None and known.session.state is State.ATTACHED
        # The session is bound to the key that opened it: another key is refused as unknown.
        session, generation, effects = self.registry.resume(request, self.clock(), key=key)
        if session.state.terminal:
            raise ResumeFoundEnded(effects)
        host = self._hosts[session.id]
        session.throttle.key = self._key_allowances.get(key)  # the new stream's key pays now
        session.admission.hold_for_key(self.key_shares.budget(key))
        queue = host.attach(generation)
        host.deliver(effects)
        metrics.RESUMES.labels("taken_over" if takeover else "resumed").inc()
        logger.info(
            "session %s resumed (generation %d)",
            session.id,
            generation,
            extra={"session_id": session.id},
        )
        return host, queue

    def audio_wait(self, key: str, audio_bytes: int) -> float:
        """Seconds until ``key``'s audio allowance would take ``audio_bytes`` (0: now, or a key
        without one); takes nothing (a bridge in this process waits on it before parsing)."""
        allowance = self._key_allowances.get(key)
        return 0.0 if allowance is None else allowance.audio_bytes.wait_s(audio_bytes, self.clock())

    def release(self, host: SessionHost, queue: SendQueue) -> None:
        """The stream of ``queue`` is gone; the session waits for a resume (or expires).

        While a durable replica drains, a session whose stream went is handed over at once.
        """
        host.release(queue)
        if self.store is not None and not self.registry.accepting:
            self._hand_over_later(host)
        self._released.set()

    def _forget(self, session: Session) -> None:
        self.registry.discard(session)
        self._hosts.pop(session.id, None)
        if self.store is not None:
            self.store.forget(session.id)
        self._freed(session)

    def _freed(self, ended: Session | None = None) -> None:
        """A place may have freed: the first in line takes it (with a queue)."""
        if self.waiting is not None:
            self.waiting.freed(ended)

    # -- durability: adopting and handing over ---------------------------------------------

    async def _adopt(self, request: pb.ResumeSession, key: str) -> None:
        """Rebuilds a stored session here when its owner is gone or handed it over.

        Returns without a session when the store has none (the resume is then refused as
        unknown); raises StreamRefused (``session_elsewhere``, retryable) while the owner lives,
        and StoreUnavailable while the store does not answer (the caller refuses the resume
        ``session_store_unavailable``, retryable). ``key`` and the resume's token are checked
        against the stored digests first: a stranger is refused as for an unknown session, the
        same answer after the same work, and learns no route and moves nothing.
        """
        assert self.store is not None
        stored = await self.store.load(request.session_id)
        if stored is None:
            return
        state = stored.state
        lock = SessionLock.unseal(state.owner_digest, state.token_digest, state.recovery_digest)
        if not lock.opens(key, request.resume_token, attached=False):
            raise resume_refused()
        # own_route: this replica restarted under its old route and takes back its own.
        why = (
            "handed_over"
            if not stored.route
            else "own_route"
            if stored.route == self.store.route
            else "owner_lost"
        )
        if stored.route and stored.route != self.store.route:
            lease = await self.store.owner_lease(stored.route)
            if lease == "serving":
                raise SessionElsewhere("the session lives on another replica", stored.route)
            if lease is not None:
                raise SessionElsewhere("the session's replica is handing it over")
        epoch = await self.store.claim(request.session_id, stored.route)
        if not epoch:
            raise SessionElsewhere("another replica is taking the session")
        self.store.adopted(request.session_id, epoch)  # this replica's writes carry the epoch
        limits = self.registry.limits
        session, effects = adopt(
            stored.state,
            stored.entries,
            limits=limits,
            engine=self.registry.engine,
            capabilities=self.registry.capabilities,
            now=self.clock(),
            budget=self.registry.budget,
        )
        self.registry.take(session)
        try:
            engine_session = await self.engine.open_session(session.id, session.config)
            await engine_session.restore_history(stored.items)
        except Exception:
            logger.exception("session %s: the engine could not adopt it", session.id)
            self.registry.forget(session)  # no tombstone: the record stays for another try
            self._freed()
            raise SessionElsewhere("the engine could not adopt the session") from None
        host = self._host(session, engine_session, epoch=epoch)
        host.deliver(effects)  # the end of a response cut with its replica, journaled
        # The input not yet committed and the commands the lost owner had not applied: the
        # stored applied_client_seq covers them, so the client will not send them again.
        durable = host.taps.of(DurableTap)
        assert durable is not None
        cut = bool(stored.state.active_response_id)
        await host.replay(
            durable.take_replay(host, stored.appends, stored.commands, response_cut=cut)
        )
        ADOPTIONS.labels(why).inc()
        logger.info(
            "session %s adopted from %s (%d events kept, %d items, %d commands replayed)",
            session.id,
            stored.route or "a draining replica",
            len(stored.entries),
            len(stored.items),
            len(stored.appends) + len(stored.commands),
            extra={"session_id": session.id},
        )
        check_adopted_cursor(session, request.last_received_seq)

    def _moved(self, session_id: str, owner: str) -> None:
        """A peer adopted the session while this replica stalled (a fenced write said so):
        the stale copy goes without a tombstone, its stream told ``going_away``
        (``session_moved``) so the client resumes at the adopter."""
        host = self._hosts.pop(session_id, None)
        if host is None:
            return
        self.registry.forget(host.session)
        if self.recorder is not None:
            self.recorder.finish(host, "moved")
        self._freed()
        host.moved()
        MOVED.inc()
        task = asyncio.get_running_loop().create_task(host.abandon())
        self._handovers.add(task)
        task.add_done_callback(self._handovers.discard)
        self._released.set()

    def _hand_over_later(self, host: SessionHost) -> None:
        task = asyncio.get_running_loop().create_task(self._hand_over(host))
        self._handovers.add(task)
        task.add_done_callback(self._handovers.discard)

    async def _hand_over(self, host: SessionHost) -> None:
        """Stops a detached session here and leaves it in the store for a peer."""
        if host.ended or self._hosts.get(host.session.id) is not host:
            return
        del self._hosts[host.session.id]
        self.registry.forget(host.session)
        if self.recorder is not None:
            self.recorder.finish(host, "handed_over")
        self._freed()
        await host.abandon()
        durable = host.taps.of(DurableTap)
        assert self.store is not None and durable is not None
        await self.store.hand_over(host.session, durable.items)

    # -- time ------------------------------------------------------------------------------

    def expire_due(self) -> None:
        """Ends every session whose deadline has passed on the clock (what the timer does)."""
        for session, effects in self.registry.tick(self.clock()):
            host = self._hosts.get(session.id)
            if host is not None:
                # The core's rule (Session.tick): a detached session lapses by its grace.
                detached = session.detached_at is not None
                host.expiry_reason = "disconnect_grace" if detached else "idle_timeout"
                host.deliver(effects)
            logger.info("session %s expired", session.id, extra={"session_id": session.id})
        if self.waiting is not None:
            self.waiting.tick()  # waits that ran out, places kept past their grace, estimates

    async def keep_expiring(self) -> None:
        """The expiry timer: runs ``expire_due`` at each deadline until cancelled."""
        while True:
            self.expire_due()
            deadline = self.registry.next_deadline()
            delay = MAX_TIMER_SLEEP_S if deadline is None else deadline - self.clock()
            await asyncio.sleep(min(max(delay, MIN_TIMER_SLEEP_S), MAX_TIMER_SLEEP_S))

    # -- the end of the server -------------------------------------------------------------

    async def drain(self, grace_s: float) -> None:
        """Refuses new sessions, tells every attached one to go, and waits (≤ grace) for them.

        The grace is the server's promise to its clients, waited out on the event loop's timer
        (a stopping server really waits); ``going_away`` tells each client how long it has.
        """
        self.registry.accepting = False
        if self.waiting is not None:
            self.waiting.drain()  # every wait ends server_shutting_down: open elsewhere
        if self.store is not None:
            await self.store.set_draining()
        for host in self:
            if host.session.state is State.DETACHED and self.store is not None:
                self._hand_over_later(host)
            host.go_away(grace_s, "shutdown")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace_s):
                while any(host.session.state is State.ATTACHED for host in self):
                    self._released.clear()
                    await self._released.wait()
        if self.store is not None:
            for host in self:  # still attached after the grace: their streams are cut now
                self._hand_over_later(host)
            if self._handovers:
                await asyncio.wait(set(self._handovers))

    async def abandon(self) -> None:
        """Stops every session's tasks and engine session without a word (server shutdown)."""
        for host in self:
            await host.abandon()
