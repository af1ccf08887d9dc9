"""The clock an engine session reads and waits on: its pacing and its latency figures.

Engines run on :data:`MONOTONIC` (``time.monotonic`` and ``asyncio.sleep``). A test hands a
session another :class:`Clock` to see what the session decided (when each chunk was due, how
long a turn took on its schedule) without depending on how fast the machine ran.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds, and a wait measured on them."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """The real one: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


MONOTONIC: Clock = MonotonicClock()
