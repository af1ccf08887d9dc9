"""The loopback engine's options: strings in, checked values out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from omni_grpc.engine.kit.options import Converters, check_choice, check_range, parse_options

_CONVERTERS: Converters = {
    "pace": str,
    "speed": float,
    "chunk_ms": int,
    "queue_size": int,
    "max_input_s": float,
    "mode": str,
    "tool_call": str,
    "recall": int,
    "context_tokens": int,
    "capacity": int,
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
    tool_call: str = "off"
    recall: int = 0
    context_tokens: int = 32768
    capacity: int = 64

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, ("turns", "mirror"))
        check_choice("tool_call", self.tool_call, ("off", "auto"))
        check_choice("pace", self.pace, ("realtime", "fast"))
        check_range("speed", self.speed, 0, 1000, above=True)
        check_range("chunk_ms", self.chunk_ms, 10, 5000)
        check_range("queue_size", self.queue_size, 8)
        check_range("max_input_s", self.max_input_s, 0, above=True)
        check_range("recall", self.recall, 0, 1)
        check_range("context_tokens", self.context_tokens, 1, 1_048_576)
        check_range("capacity", self.capacity, 1, 100_000)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> LoopbackOptions:
        """Reads string options; raises ValueError naming any unknown key or bad value."""
        return cls(**parse_options("loopback", options, _CONVERTERS))  # type: ignore[arg-type]
