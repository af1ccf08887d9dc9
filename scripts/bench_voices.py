#!/usr/bin/env python3
"""End of speech to first audio with each voice of the embedded engine, turns interleaved, and
where the time goes in between.

    .venv/bin/python scripts/bench_voices.py [--turns N] [--engines "tts=piper;tts=espeak"]
                                             [--responders echo,smollm2] [--question TEXT]

One engine per option set of ``--engines`` (``;`` between sets, ``,`` between KEY=VALUE
engine options; ``first_words=N`` sets the voice's first phrase instead, to compare cuts),
each with SmolLM2 when it is installed. Their turns alternate, echo responder then SmolLM2,
engine after engine, so that every engine meets the same load: on a shared machine, load
changes from minute to minute by more than the engines differ.
A turn is the one ``scripts/bench_embedded.py`` times (the question streamed in real time).
The figures in docs/engines.md came from this.

The stages are timed by wrapping the engine's models (the recognizer, the language model, the
voice) and reading the session's events, each moment on the wall clock from the end of the
speech: the transcription that ended up as the turn's started and ended, speech_stopped (the
turn-end decision), the language model was asked and gave its first text (the prompt's prefill
and first tokens), the first phrase went to the voice and came back, the first audio went out.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench_embedded import QUESTION, one_turn

from omni_grpc.engine.embedded import EmbeddedEngine

# Stages in the order they happen; each row is the median moment over the turns, in ms after
# the end of speech.
STAGES = (
    ("asr_start", "transcription started (at the pause)"),
    ("asr_done", "transcription done"),
    ("speech_stopped", "speech_stopped (turn-end decision)"),
    ("lm_start", "language model asked"),
    ("lm_first", "first text (prefill + first tokens)"),
    ("tts_start", "first phrase to the voice"),
    ("tts_done", "first phrase synthesized"),
    ("output_audio_delta", "first audio out"),
)


class Moments:
    """The wall-clock moments the wrapped models record, first of each kind after ``since``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    def mark(self, kind: str) -> None:
        self.seen.append((kind, time.perf_counter()))

    def first_after(self, since: float) -> dict[str, float]:
        firsts: dict[str, float] = {}
        for kind, moment in self.seen:
            if moment >= since:
                firsts.setdefault(kind, moment)
        return firsts


def instrument(engine: EmbeddedEngine, moments: Moments) -> None:
    """Wraps the engine's recognizer, language model and voice so that they record moments."""
    runtime = engine.runtime
    assert runtime is not None
    asr = runtime.asr
    transcribe = asr.transcribe

    def timed_transcribe(*args: Any, **kwargs: Any) -> str:
        moments.mark("asr_start")
        try:
            return transcribe(*args, **kwargs)
        finally:
            moments.mark("asr_done")

    asr.transcribe = timed_transcribe  # type: ignore[method-assign]
    if runtime.smol is not None:
        model = runtime.smol._model
        generate = model.generate

        def timed_generate(*args: Any, **kwargs: Any) -> Iterator[str]:
            moments.mark("lm_start")
            for piece in generate(*args, **kwargs):
                moments.mark("lm_first")
                yield piece

        model.generate = timed_generate  # type: ignore[method-assign]
    tts = runtime.tts
    synthesize: Callable[..., Any] = tts.synthesize

    async def timed_synthesize(*args: Any, **kwargs: Any) -> bytes:
        moments.mark("tts_start")
        try:
            pcm: bytes = await synthesize(*args, **kwargs)
            return pcm
        finally:
            moments.mark("tts_done")

    tts.synthesize = timed_synthesize  # type: ignore[method-assign]


async def timed_turn(
    engine: EmbeddedEngine, moments: Moments, responder: str, question: str
) -> dict[str, float]:
    """One turn's stage moments, in ms after the end of speech."""
    marks: dict[str, float] = {}
    moments.seen.clear()
    await one_turn(engine, responder, question, marks)
    speech_end = marks["speech_end"]
    found = {**moments.first_after(speech_end), **marks}
    return {kind: (found[kind] - speech_end) * 1000 for kind, _ in STAGES if kind in found}


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--engines", default="tts=piper;tts=espeak", help="option sets")
    parser.add_argument("--responders", default="echo,smollm2", help="comma-separated")
    parser.add_argument("--question", default=QUESTION, help="the words the turns speak")
    args = parser.parse_args()
    option_sets = {
        label: dict(o.split("=", 1) for o in label.split(",")) for label in args.engines.split(";")
    }
    first_words = {label: options.pop("first_words", "") for label, options in option_sets.items()}
    engines = {label: EmbeddedEngine(options) for label, options in option_sets.items()}
    moments = {label: Moments() for label in engines}
    for label, engine in engines.items():
        await engine.start()
        instrument(engine, moments[label])
        if first_words[label]:
            assert engine.runtime is not None
            engine.runtime.tts.first_words = int(first_words[label])
    with_lm = all(e.runtime is not None and e.runtime.smol is not None for e in engines.values())
    responders = [r for r in args.responders.split(",") if with_lm or r == "echo"]
    results: dict[tuple[str, str], list[dict[str, float]]] = {
        (label, responder): [] for label in engines for responder in responders
    }
    load_before = os.getloadavg()[0]
    for _ in range(args.turns):
        for label, engine in engines.items():
            for responder in responders:
                turn = await timed_turn(engine, moments[label], responder, args.question)
                results[(label, responder)].append(turn)
    for engine in engines.values():
        await engine.stop()
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    for (label, responder), turns in results.items():
        print(f"\n{label} {responder}: ms after the end of speech, median (min-max), n turns")
        for kind, stage in STAGES:
            values = [turn[kind] for turn in turns if kind in turn]
            if values:
                print(
                    f"  {stage:40s} {statistics.median(values):6.0f} "
                    f"({min(values):.0f}-{max(values):.0f}) n={len(values)}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
