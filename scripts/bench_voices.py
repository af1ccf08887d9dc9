#!/usr/bin/env python3
"""End of speech to first audio with each voice of the embedded engine, turns interleaved.

    .venv/bin/python scripts/bench_voices.py [--turns N] [--voices piper,espeak]

One engine per voice (``tts`` option), each with SmolLM2 when it is installed. Their turns
alternate, echo responder then SmolLM2, voice after voice, so that every voice meets the same
load: on a shared machine, load changes from minute to minute by more than the voices differ.
A turn is the one ``scripts/bench_embedded.py`` times (the question streamed in real time).
The figures in docs/engines.md came from this.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys

from bench_embedded import one_turn

from omni_grpc.engine.embedded import EmbeddedEngine


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--voices", default="piper,espeak", help="tts options, comma-separated")
    args = parser.parse_args()
    engines = {voice: EmbeddedEngine({"tts": voice}) for voice in args.voices.split(",")}
    for engine in engines.values():
        await engine.start()
    with_lm = all(e.runtime is not None and e.runtime.smol is not None for e in engines.values())
    responders = ["echo", "smollm2"] if with_lm else ["echo"]
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {
        (voice, responder): [] for voice in engines for responder in responders
    }
    load_before = os.getloadavg()[0]
    for _ in range(args.turns):
        for voice, engine in engines.items():
            for responder in responders:
                results[(voice, responder)].append(await one_turn(engine, responder))
    for engine in engines.values():
        await engine.stop()
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    for (voice, responder), turns in results.items():
        for index, label in enumerate(("end of speech", "speech_stopped")):
            values = [turn[index] for turn in turns]
            print(
                f"{voice:7s} {responder:8s} {label:15s} -> first audio byte: median "
                f"{statistics.median(values):.0f} ms (min {min(values):.0f}, "
                f"max {max(values):.0f}, n={len(values)})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
