#!/usr/bin/env python3
"""End of speech to first audio when several sessions of one embedded engine speak at once.

    .venv/bin/python scripts/bench_sessions.py [--sessions 1,2,3] [--rounds N]
                                               [--engines "asr_rescoring=off;tts=espeak"]
                                               [--responder smollm2|echo] [--stagger-ms MS]
                                               [--question TEXT ...]

A round is N sessions each speaking a question in real time (session i the i-th of the
``--question`` options, round robin; scripts/bench_embedded.py's by default),
the i-th starting i * ``--stagger-ms`` later (0 by default: every turn ends at the same moment,
the worst case for a shared model). Each turn's time from the end of its speech to its first
answer audio is kept; rounds alternate engine after engine and size after size, so that every
engine meets the same load on a shared machine. Printed per engine and size: the median, the
90th percentile and the worst turn, and how many turns made the 1.0 s target, then the same
for each question when there are several (a long answer beside a short one); then, per engine,
each size's median against one session's (the cost of company, as a ratio).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys

from bench_embedded import QUESTION, one_turn

from omni_grpc.engine.embedded import EmbeddedEngine

TARGET_MS = 1000.0


async def one_round(
    engine: EmbeddedEngine,
    sessions: int,
    responder: str,
    questions: list[str],
    stagger_s: float,
) -> list[tuple[str, float]]:
    """Each session's question and end of speech -> first audio (ms), ``sessions`` at once."""

    async def turn(index: int) -> tuple[str, float]:
        question = questions[index % len(questions)]
        await asyncio.sleep(index * stagger_s)
        first_audio_ms, _, _ = await one_turn(engine, responder, question)
        return question, first_audio_ms

    return list(await asyncio.gather(*(turn(i) for i in range(sessions))))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def row(label: str, size: str, values: list[float]) -> str:
    made = sum(v <= TARGET_MS for v in values)
    return (
        f"{label:40s} {size:>8s} {statistics.median(values):7.0f} "
        f"{percentile(values, 0.9):7.0f} {max(values):7.0f}  {made}/{len(values)}"
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="1,2,3", help="comma-separated sizes")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--engines", default="tts=espeak", help="option sets, ';' between")
    parser.add_argument("--responder", default="smollm2")
    parser.add_argument("--stagger-ms", type=float, default=0.0)
    parser.add_argument("--question", action="append", help="a turn's words (repeatable)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sessions.split(",")]
    questions = args.question or [QUESTION]
    engines = {
        label: EmbeddedEngine(dict(o.split("=", 1) for o in label.split(",")))
        for label in args.engines.split(";")
    }
    for engine in engines.values():
        await engine.start()
    results: dict[tuple[str, int], list[tuple[str, float]]] = {
        (e, n): [] for e in engines for n in sizes
    }
    load_before = os.getloadavg()[0]
    for _ in range(args.rounds):
        for size in sizes:
            for label, engine in engines.items():
                results[(label, size)] += await one_round(
                    engine, size, args.responder, questions, args.stagger_ms / 1000
                )
    for engine in engines.values():
        await engine.stop()
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(
        f"responder {args.responder}, turns {args.stagger_ms:.0f} ms apart; "
        "end of speech -> first audio, ms"
    )
    print(f"{'engine':40s} {'sessions':>8s} {'median':>7s} {'p90':>7s} {'worst':>7s}  <= 1.0 s")
    for (label, size), turns in results.items():
        print(row(label, str(size), [ms for _, ms in turns]))
        for question in questions if len(questions) > 1 and size > 1 else []:
            print(row(f"  {question!r}"[:40], "", [ms for q, ms in turns if q == question]))
    if 1 in sizes:
        print("\nmedian against one session's")
        for label in engines:
            alone = statistics.median(ms for _, ms in results[(label, 1)])
            ratios = ", ".join(
                f"{size}: {statistics.median(ms for _, ms in results[(label, size)]) / alone:.2f}x"
                for size in sizes
                if size != 1
            )
            print(f"  {label}: {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
