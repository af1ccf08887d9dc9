"""The embedded engine's options: strings in, checked values out."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

RESPONDERS = ("auto", "echo", "smollm2")
PACES = ("realtime", "fast")

_CONVERTERS: dict[str, Callable[[str], object]] = {
    "responder": str,
    "pace": str,
    "voice": str,
    "words_per_minute": int,
    "asr_threads": int,
    "min_speech_ms": float,
    "chunk_ms": int,
    "max_input_s": float,
    "queue_size": int,
    "server_vad": str,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbeddedOptions:
    """How the engine runs; every option is a string on the command line.

    * ``responder``: ``smollm2`` (the language model), ``echo`` ("You said: ..."), or
      ``auto`` (the default): SmolLM2 when its weights are installed, else echo.
    * ``pace``: ``realtime`` (default) releases audio no faster than it plays, so a
      barge-in finds the response still running; ``fast`` releases it as it is made.
    * ``voice``: the espeak-ng voice when a session names none it knows; default ``en-us``.
    * ``words_per_minute``: speaking rate, 80 to 450; default 175.
    * ``asr_threads``: threads of the speech recognizer; default 2.
    * ``min_speech_ms``: speech shorter than this never starts a turn; default 64.
    * ``chunk_ms``: length of one output audio chunk, 20 to 200; default 100.
    * ``max_input_s``: the most input audio one turn may hold; default 120.
    * ``queue_size``: the bound of each session's command and event queues; default 256.
    * ``server_vad``: ``on`` (default) offers server VAD and makes it the sessions' default;
      ``off`` leaves every turn to the client's commits (push to talk).
    """

    responder: str = "auto"
    pace: str = "realtime"
    voice: str = "en-us"
    words_per_minute: int = 175
    asr_threads: int = 2
    min_speech_ms: float = 64.0
    chunk_ms: int = 100
    max_input_s: float = 120.0
    queue_size: int = 256
    server_vad: str = "on"

    def __post_init__(self) -> None:
        if self.responder not in RESPONDERS:
            raise ValueError(
                f"responder must be one of {', '.join(RESPONDERS)}, got {self.responder!r}"
            )
        if self.pace not in PACES:
            raise ValueError(f"pace must be 'realtime' or 'fast', got {self.pace!r}")
        if not 80 <= self.words_per_minute <= 450:
            raise ValueError(f"words_per_minute must be in [80, 450], got {self.words_per_minute}")
        if not 1 <= self.asr_threads <= 16:
            raise ValueError(f"asr_threads must be in [1, 16], got {self.asr_threads}")
        if not (math.isfinite(self.min_speech_ms) and 0 <= self.min_speech_ms <= 1000):
            raise ValueError(f"min_speech_ms must be in [0, 1000], got {self.min_speech_ms}")
        if not 20 <= self.chunk_ms <= 200:
            raise ValueError(f"chunk_ms must be in [20, 200], got {self.chunk_ms}")
        if not (math.isfinite(self.max_input_s) and 1 <= self.max_input_s <= 3600):
            raise ValueError(f"max_input_s must be in [1, 3600], got {self.max_input_s}")
        if self.server_vad not in ("on", "off"):
            raise ValueError(f"server_vad must be 'on' or 'off', got {self.server_vad!r}")
        if self.queue_size < 16:
            raise ValueError(f"queue_size must be at least 16, got {self.queue_size}")

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> EmbeddedOptions:
        """Reads string options; raises ValueError naming any unknown key or bad value."""
        unknown = sorted(set(options) - set(_CONVERTERS))
        if unknown:
            raise ValueError(
                f"unknown embedded option(s) {', '.join(unknown)}; known: {', '.join(_CONVERTERS)}"
            )
        values: dict[str, object] = {}
        for key, text in options.items():
            try:
                values[key] = _CONVERTERS[key](text)
            except ValueError:
                raise ValueError(f"embedded option {key}={text!r} is not a valid value") from None
        return cls(**values)  # type: ignore[arg-type]
