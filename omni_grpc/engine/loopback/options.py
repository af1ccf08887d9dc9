"""The loopback engine's options: strings in, checked values out."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_CONVERTERS: dict[str, Callable[[str], object]] = {
    "pace": str,
    "speed": float,
    "chunk_ms": int,
    "queue_size": int,
    "max_input_s": float,
    "mode": str,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopbackOptions:
    """How a loopback engine behaves; see the package docstring for each option."""

    pace: str = "realtime"
    speed: float = 1.0
    chunk_ms: int = 100
    queue_size: int = 256
    max_input_s: float = 300.0
    mode: str = "turns"

    def __post_init__(self) -> None:
        if self.mode not in ("turns", "mirror"):
            raise ValueError(f"mode must be 'turns' or 'mirror', got {self.mode!r}")
        if self.pace not in ("realtime", "fast"):
            raise ValueError(f"pace must be 'realtime' or 'fast', got {self.pace!r}")
        if not (math.isfinite(self.speed) and 0 < self.speed <= 1000):
            raise ValueError(f"speed must be in (0, 1000], got {self.speed}")
        if not 10 <= self.chunk_ms <= 5000:
            raise ValueError(f"chunk_ms must be in [10, 5000], got {self.chunk_ms}")
        if self.queue_size < 8:
            raise ValueError(f"queue_size must be at least 8, got {self.queue_size}")
        if not (math.isfinite(self.max_input_s) and self.max_input_s > 0):
            raise ValueError(f"max_input_s must be positive, got {self.max_input_s}")

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> LoopbackOptions:
        """Reads string options; raises ValueError naming any unknown key or bad value."""
        unknown = sorted(set(options) - set(_CONVERTERS))
        if unknown:
            raise ValueError(
                f"unknown loopback option(s) {', '.join(unknown)}; known: {', '.join(_CONVERTERS)}"
            )
        values = {}
        for key, text in options.items():
            try:
                values[key] = _CONVERTERS[key](text)
            except ValueError:
                raise ValueError(f"loopback option {key}={text!r} is not a valid value") from None
        return cls(**values)  # type: ignore[arg-type]
