"""The mirror engine's own work, counted apart from the gateway's, inside a benchmark's server.

The benchmarks measure the server process's CPU per chunk; with the loopback engine in
``mirror`` mode part of it is the engine's (checking the append, making its events), which a
real engine would spend on a model instead. :func:`install` has the loopback session wrap every
command handler (those its worker applies and those of the synchronous path) in a CPU clock of
the event loop's thread, through the worker's ``handler_meter`` hook (nothing is replaced on a
class or an instance), so the gateway's share is the process's CPU less :func:`spent_s`.

The clock reads CPU time, not wall time: a handler that waits (for room in its event queue)
counts only what the loop ran meanwhile, which at the loads measured is nothing or little.
A CPU clock read is a system call (no vDSO for it), two per handler, and the server's CPU counts
them, the raw echo's does not: so one call in :data:`SAMPLE_EVERY` is clocked and its time
counts for all of them (the handlers of a benchmark's step are thousands of alike appends).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

_spent_ns: list[int] = []  # one counter, present once installed
_calls = [0]  # metered calls so far, clocked or not
SAMPLE_EVERY = 16


def install() -> None:
    """Meters the loopback session's handlers in this process (a benchmark's child only)."""
    from omni_grpc.engine.loopback.session import LoopbackSession

    LoopbackSession.handler_meter = metered


def metered(handler: Callable[..., Any], *, every: int = SAMPLE_EVERY) -> Callable[..., Any]:
    """``handler``, its CPU time counted as the engine's, clocked one call in ``every`` (the
    peer benchmark meters its stage stand-in with it too, every call: it runs once per second
    of a session's input, too seldom to sample)."""
    if not _spent_ns:
        _spent_ns.append(0)
    # A coroutine handler stays one and a plain one plain: the worker tells them apart to
    # choose a command's path, and the meter must not change it.
    if inspect.iscoroutinefunction(handler):

        async def run_async(*args: Any) -> Any:
            if not _clock_this_one(every):
                return await handler(*args)
            began = time.thread_time_ns()
            try:
                return await handler(*args)
            finally:
                _spent_ns[0] += (time.thread_time_ns() - began) * every

        return run_async

    def run(*args: Any) -> Any:
        if not _clock_this_one(every):
            return handler(*args)
        began = time.thread_time_ns()
        try:
            return handler(*args)
        finally:
            _spent_ns[0] += (time.thread_time_ns() - began) * every

    return run


def _clock_this_one(every: int) -> bool:
    _calls[0] += 1
    return _calls[0] % every == 0


def spent_s() -> float | None:
    """CPU seconds the engine's handlers have used; None where no meter is installed."""
    return _spent_ns[0] / 1e9 if _spent_ns else None
