"""A test hook: a durable replica that kills itself at a chosen moment of a session's turn.

The cluster tests (``tests/cluster/test_exactly_once.py``) must kill the owner of a session at
exact moments (mid-append, between the last append and the commit, mid-answer...) and a kill
from outside cannot aim that well. So a replica started with the environment variable
:data:`ENV` set, read once at start-up, SIGKILLs itself when one of its sessions reaches the
moment it names: ``command:<kind>:<n>``, once the n-th command of that kind a session sent
here was handed to its engine, or ``event:<kind>:<n>``, once the n-th event of that kind was
published; and in both cases only after the store has written the round that holds it (so the
stored number covers it: the case a new owner must get right). Only sessions opened here count,
not adopted ones, so the adopter does not kill itself in turn. The hook is a tap
(:mod:`omni_grpc.server.taps`), registered only when armed.

**Off in production**: with the variable unset (as every deployment has it) :func:`armed` is
None and no tap is registered: a host pays nothing for it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
from collections.abc import Callable
from typing import Protocol

from omni_grpc.core import Effects
from omni_grpc.core.commands import kind_of
from omni_grpc.server.taps import DurableTap, HostTap, SessionHost
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

ENV = "OMNI_TEST_KILL_AT"


class _Store(Protocol):
    rounds: int  # rounds of writes done


def _read(value: str) -> tuple[str, str, int] | None:
    if not value:
        return None
    where, kind, count = value.split(":")
    if where not in ("command", "event") or int(count) < 1:
        raise ValueError(f"{ENV} must be command:<kind>:<n> or event:<kind>:<n>, not {value!r}")
    return where, kind, int(count)


_AIM = _read(os.environ.get(ENV, ""))  # read once, at start-up


class Fault(HostTap):
    """Counts one session's commands and events (a tap of its host) and, at the aimed one,
    kills this replica once the store holds it (:func:`die_written`)."""

    def __init__(self, where: str, kind: str, count: int) -> None:
        self._where, self._kind, self._count = where, kind, count
        self._seen: collections.Counter[str] = collections.Counter()
        self._command: str | None = None  # the kind of the command being handled, if engine-bound
        self._dying: asyncio.Task[None] | None = None

    def admitted(
        self, host: SessionHost, generation: int, request: pb.ConverseRequest, effects: Effects
    ) -> None:
        self._command = kind_of(effects.engine[0]) if effects.engine else None

    def handled(self, host: SessionHost, generation: int, request: pb.ConverseRequest) -> None:
        if self._command is not None and self.aimed("command", self._command):
            self._die(host)  # the command is with the engine
        self._command = None

    def event(self, host: SessionHost, kind: str | None, event: pb.ConverseResponse) -> None:
        if self.aimed("event", kind or ""):
            self._die(host)  # published right after this: the task below runs later

    def aimed(self, where: str, kind: str) -> bool:
        """Counts a command handed (``where`` "command") or an event published ("event");
        True when it is the aimed one."""
        if where != self._where or kind != self._kind:
            return False
        self._seen[kind] += 1
        return self._seen[kind] == self._count

    def _die(self, host: SessionHost) -> None:
        durable = host.taps.of(DurableTap)
        store = durable.store if durable is not None else None

        def mark() -> None:
            if durable is not None:
                durable.store.mark(host.session, durable.items)

        self._dying = asyncio.create_task(die_written(store, mark))


async def die_written(store: _Store | None, mark: Callable[[], None]) -> None:
    """SIGKILLs this process once the store has written the session (``mark`` makes it dirty):
    a round that began before the moment may not hold it, the one after does."""
    if store is not None:
        first = store.rounds
        while store.rounds < first + 2:
            mark()
            await asyncio.sleep(0.001)
    logger.warning("%s: killing this replica now", ENV)
    os.kill(os.getpid(), signal.SIGKILL)


def armed(*, adopted: bool) -> Fault | None:
    """The tap for a new session's host, or None (unset, as in production, or adopted)."""
    if _AIM is None or adopted:
        return None
    return Fault(*_AIM)
