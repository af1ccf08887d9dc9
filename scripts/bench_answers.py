#!/usr/bin/env python3
"""Judges the default engine's answers to what people say to a voice assistant.

    .venv/bin/python scripts/bench_answers.py [--part tuning|held-out|all] [--show] [--json]

Each line of the set (scripts/answer_set.py: questions, commands, requests, small talk) is
said to a fresh session of the embedded engine as it serves by default (SmolLM2, the default
instructions), through the session's own answering path: the line goes in as a typed user
turn (text in, not speech: this measures the answer, not the hearing), then a response,
text out. Every answer is classed by the rubric (scripts/answer_rubric.py); the table counts
the classes per kind of line, and "good" counts the answers in the class the line expects.
Latency is the engine's own, from the response's request to its first text and to its end.

``--part held-out`` scores the lines no tuning of the prompt looked at.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from answer_rubric import CLASSES, Judged, classify, words
from answer_set import KINDS, Said, said

from omni_grpc.bench import harness
from omni_grpc.core.commands import engine_command
from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import Limits
from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.wire import pb

ANSWER_TIMEOUT_S = 120.0


async def ask(engine: EmbeddedEngine, line: Said, number: int) -> Judged:
    """Says ``line`` to a fresh text session and judges the answer."""
    requested = pb.SessionConfig(output_modalities=[pb.MODALITY_TEXT])
    session = await engine.open_session(
        f"answers-{number}", resolve_config(requested, Limits(), engine.features)
    )
    commands = (
        pb.ConverseRequest(client_seq=1, append_input_text=pb.AppendInputText(text=line.text)),
        pb.ConverseRequest(client_seq=2, create_response=pb.CreateResponse()),
    )
    for command in commands:
        await session.submit(engine_command(command))  # type: ignore[arg-type]
    text, done = "", None
    async with asyncio.timeout(ANSWER_TIMEOUT_S):
        async for event in session.events():
            if event.HasField("output_text_delta"):
                text += event.output_text_delta.delta
            elif event.HasField("response_done"):
                done = event.response_done.response
                break
    await session.close()
    assert done is not None
    answer = text.strip()
    latency = done.latency
    return Judged(line, answer, classify(line, answer), latency.first_text_ms, latency.total_ms)


def counts(judged: list[Judged], kind: str) -> list[str]:
    """One row of the table: the classes of ``kind``'s answers (all: ``kind`` "all")."""
    mine = [j for j in judged if kind in ("all", j.line.kind)]
    classes = [str(sum(j.verdict == c for j in mine)) for c in CLASSES]
    good = sum(j.good for j in mine)
    median_words = statistics.median(len(words(j.answer)) for j in mine) if mine else 0
    return [kind, str(len(mine)), *classes, f"{good}/{len(mine)}", f"{median_words:.0f}"]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def bench(part: str, show: bool, as_json: bool) -> int:
    load_before = os.getloadavg()
    engine = EmbeddedEngine({})  # the default engine, as a server starts it
    engine.load()
    judged = []
    try:
        for number, line in enumerate(said(part)):
            one = await ask(engine, line, number)
            judged.append(one)
            if show or not one.good:
                print(f"  {one.verdict:12} {line.kind:10} {line.text!r} -> {one.answer!r}")
    finally:
        await engine.stop()
    header = ["kind", "lines", *CLASSES, "good", "median words"]
    rows = [counts(judged, kind) for kind in (*KINDS, "all")]
    first = [j.first_text_ms for j in judged]
    total = [j.total_ms for j in judged]
    print(f"\nthe {part} part of the set, {len(judged)} lines; the default engine, text in")
    harness.print_table(header, rows)
    print(
        f"\nanswer latency (engine's clock, ms): first text p50 {statistics.median(first):.0f}"
        f" p90 {percentile(first, 0.9):.0f}; whole answer p50 {statistics.median(total):.0f}"
        f" p90 {percentile(total, 0.9):.0f}"
    )
    harness.print_load_average(load_before)
    if as_json:
        harness.print_json(
            {
                "part": part,
                "table": {"header": header, "rows": rows},
                "latency_ms": {
                    "first_text_p50": statistics.median(first),
                    "first_text_p90": percentile(first, 0.9),
                    "total_p50": statistics.median(total),
                    "total_p90": percentile(total, 0.9),
                },
                "load_average_before": load_before,
                "load_average_after": os.getloadavg(),
                "answers": [
                    {
                        "kind": j.line.kind,
                        "said": j.line.text,
                        "answer": j.answer,
                        "verdict": j.verdict,
                        "expected": j.line.expected,
                        "first_text_ms": j.first_text_ms,
                        "total_ms": j.total_ms,
                    }
                    for j in judged
                ],
            }
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("tuning", "held-out", "all"), default="tuning")
    parser.add_argument("--show", action="store_true", help="print every answer")
    parser.add_argument("--json", action="store_true", help=harness.JSON_HELP)
    args = parser.parse_args()
    with harness.progress_to_stderr(args.json):
        return asyncio.run(bench(args.part, args.show, args.json))


if __name__ == "__main__":
    sys.exit(main())
