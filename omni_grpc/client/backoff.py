"""How long to wait between reconnect attempts: capped exponential backoff with jitter."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconnectPolicy:
    """Bounds on reconnecting: the delays, how many attempts, and how long in all.

    Delays grow from ``initial_backoff_s`` by ``multiplier`` up to ``max_backoff_s``; each is
    cut by up to ``jitter`` (a fraction) at random, so clients cut off together do not come
    back together. The client gives up after ``max_attempts`` attempts or ``max_elapsed_s``
    seconds, whichever comes first; it also never tries past the server's disconnect grace,
    after which the session is gone anyway.
    """

    initial_backoff_s: float = 0.05
    max_backoff_s: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5
    max_attempts: int = 20
    max_elapsed_s: float = 30.0

    def __post_init__(self) -> None:
        if not 0 < self.initial_backoff_s <= self.max_backoff_s:
            raise ValueError("need 0 < initial_backoff_s <= max_backoff_s")
        if self.multiplier < 1:
            raise ValueError("multiplier must be at least 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        if self.max_attempts < 1 or self.max_elapsed_s <= 0:
            raise ValueError("max_attempts and max_elapsed_s must be positive")

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """Yields the wait before each attempt after the first, forever; the caller bounds it."""
        rng = rng or random.Random()
        base = self.initial_backoff_s
        while True:
            yield base * (1.0 - self.jitter * rng.random())
            base = min(base * self.multiplier, self.max_backoff_s)
