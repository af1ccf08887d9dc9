"""A test hook: a durable replica that kills itself at a chosen moment of a session's turn.

The cluster tests (``tests/cluster/test_exactly_once.py``) must kill the owner of a session at
exact moments (mid-append, between the last append and the commit, mid-answer...) and a kill
from outside cannot aim that well. So a replica started with the environment variable
:data:`ENV` set, read once at start-up, SIGKILLs itself when one of its sessions reaches the
moment it names: ``command:<kind>:<n>``, once the n-th command of that kind a session sent here
was applied, or ``event:<kind>:<n>``, once the n-th event of that kind was published; and
in both cases only after the store has written the round that holds it (so the stored number
covers it: the case a new owner must get right). Only sessions opened here count, not adopted
ones, so the adopter does not kill itself in turn.

**Off in production**: with the variable unset (as every deployment has it) :func:`armed` is
None and a host pays one ``is not None`` check per command and event.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
from collections.abc import Callable
from typing import Protocol

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


class Fault:
    """Counts one session's commands and events and fires at the aimed one."""

    def __init__(self, where: str, kind: str, count: int) -> None:
        self._where, self._kind, self._count = where, kind, count
        self._seen: collections.Counter[str] = collections.Counter()

    def command(self, kind: str | None) -> bool:
        """Counts a command applied; True when it is the aimed one (see :func:`die_written`)."""
        return self._saw("command", kind or "")

    def event(self, kind: str | None) -> bool:
        """Counts an event published; True when it is the aimed one."""
        return self._saw("event", kind or "")

    def _saw(self, where: str, kind: str) -> bool:
        if where != self._where or kind != self._kind:
            return False
        self._seen[kind] += 1
        return self._seen[kind] == self._count


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


def armed(adopted: bool) -> Fault | None:
    """The hook for a new session's host, or None (unset, as in production, or adopted)."""
    if _AIM is None or adopted:
        return None
    return Fault(*_AIM)
