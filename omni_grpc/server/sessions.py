"""Every session one server hosts: opening and resuming them, expiring them on time, draining.

:class:`Sessions` owns the core :class:`Registry`, the engine, and one :class:`SessionHost` per
live session. It reads the one clock of the whole server, injected so that tests move time
instead of sleeping: the registry, the hosts and the expiry timer all see the same ``now``. The
servicer only asks it for a stream's :class:`SendQueue` when a stream starts (``open`` or
``resume``) and hands the queue back when the stream ends (``release``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence

from opentelemetry.trace import Tracer

from omni_grpc.core import Effects, Registry, Session, State, StreamRefused
from omni_grpc.core.errors import Status
from omni_grpc.core.rate_limits import KeyAllowances
from omni_grpc.engine.base import Engine
from omni_grpc.server import metrics
from omni_grpc.server.budget import MemoryBudget, SessionCharge
from omni_grpc.server.host import SendQueue, SessionHost
from omni_grpc.server.tracing import TurnTraces
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

# The expiry timer sleeps until the next deadline, but at most this long (in clock seconds),
# so it sees deadlines that appear while it sleeps and a clock that tests move by hand.
MAX_TIMER_SLEEP_S = 0.5
MIN_TIMER_SLEEP_S = 0.005


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
        tracer: Tracer | None = None,
    ) -> None:
        self.registry = registry
        self.engine = engine
        self.clock = clock
        # The rate allowance of each API key, shared by every session it opens or resumes.
        self._key_allowances = KeyAllowances(tuple(api_keys), registry.limits, clock())
        # Input audio and queued output of every session together (see server/budget.py).
        self.budget = MemoryBudget(registry.limits.memory_budget_bytes)
        self._hosts: dict[str, SessionHost] = {}
        # Set whenever a stream lets go of its session, so a drain can wait for the last one.
        self._released = asyncio.Event()
        self._tracer = tracer  # None: tracing is off, and no session pays for it
        metrics.SESSION_GAUGES.watch(self)  # attached and detached, counted at scrape time

    def __iter__(self) -> Iterator[SessionHost]:
        return iter(list(self._hosts.values()))

    # -- streams start and end -------------------------------------------------------------

    async def open(self, request: pb.OpenSession, key: str = "") -> tuple[SessionHost, SendQueue]:
        """Creates a session and its engine session; raises StreamRefused when it cannot.

        ``key`` is the API key the stream presented: the session is bound to it, and its
        commands count against it.
        """
        session, effects = self.registry.open(request, self.clock(), key=key)
        session.throttle.key = self._key_allowances.get(key)
        try:
            engine_session = await self.engine.open_session(session.id, session.config)
        except Exception:
            logger.exception(
                "session %s: the engine could not open it",
                session.id,
                extra={"session_id": session.id},
            )
            self.registry.discard(session)
            raise StreamRefused(
                Status.UNAVAILABLE,
                "engine_error",
                "the engine could not open a session",
                retryable=True,
                retry_after_s=1.0,
            ) from None
        charge = SessionCharge(self.budget, self.registry.limits.max_pending_input_bytes)
        turns = TurnTraces(self._tracer, session.id) if self._tracer is not None else None
        host = SessionHost(session, engine_session, self._forget, self.clock, charge, turns)
        self._hosts[session.id] = host
        queue = host.attach(1)
        host.deliver(effects)
        metrics.SESSIONS_OPENED.inc()
        logger.info("session %s opened", session.id, extra={"session_id": session.id})
        return host, queue

    def resume(self, request: pb.ResumeSession, key: str = "") -> tuple[SessionHost, SendQueue]:
        """Reattaches a session to a new stream.

        Raises StreamRefused or ResumeGap when it cannot, and ResumeFoundEnded (with the events the
        client missed, the ending included) when the session ended since.
        """
        # A resume while a stream is attached takes the session over (counted apart).
        known = self._hosts.get(request.session_id)
        takeover = known is not None and known.session.state is State.ATTACHED
        # The session is bound to the key that opened it: another key is refused as unknown.
        session, generation, effects = self.registry.resume(request, self.clock(), key=key)
        if session.state.terminal:
            raise ResumeFoundEnded(effects)
        host = self._hosts[session.id]
        session.throttle.key = self._key_allowances.get(key)  # the new stream's key pays now
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

    def release(self, host: SessionHost, queue: SendQueue) -> None:
        """The stream of ``queue`` is gone; the session waits for a resume (or expires)."""
        host.release(queue)
        self._released.set()

    def _forget(self, session: Session) -> None:
        self.registry.discard(session)
        self._hosts.pop(session.id, None)

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
        for host in self:
            host.go_away(grace_s, "shutdown")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace_s):
                while any(host.session.state is State.ATTACHED for host in self):
                    self._released.clear()
                    await self._released.wait()

    async def abandon(self) -> None:
        """Stops every session's tasks and engine session without a word (server shutdown)."""
        for host in self:
            await host.abandon()
