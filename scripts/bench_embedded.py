#!/usr/bin/env python3
"""Measures the embedded engine on this machine, stage by stage and end to end.

    .venv/bin/python scripts/bench_embedded.py [--turns N] [--no-lm] [--tts piper|espeak]
                                               [--asr-model base|tiny.en] [--wer CONFIG,...]
                                               [--asr-rescoring auto|on|off]
                                               [--partial-transcripts on|off] [--question TEXT]

Stages, each timed on its own: model loading, Silero VAD per 32 ms window, Whisper on one
spoken question, SmolLM2's first token, token rate and score on the question set
(scripts/lm_questions.py), the voice's first sentence and its real-time factor (``--tts``
picks the voice: piper or espeak). End to end, a session hears the question streamed in real
time (20 ms chunks, as a microphone would send them) and we time, on the wall clock, from the
end of the speech (the last speech sample sent) and from ``speech_stopped`` to the first byte
of answer audio, once with the echo responder and once with SmolLM2. Then the word error rate
on the speech test set, per voice, for each ASR configuration in ``--wer`` (names from
scripts/bench_hearing.py; the engine's models by default, "" for none), with the time each
transcription takes. ``--partial-transcripts off`` measures the engine without the words it
sends while a turn is spoken; ``--question`` speaks other words (a long turn, for that);
``--asr-rescoring off`` keeps Whisper's likeliest reading where SmolLM2 would choose.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

import bench_hearing
import lm_questions
import make_test_speech as speech
import speech_set
from google.protobuf import struct_pb2

from omni_grpc.core.commands import engine_command
from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import Limits
from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.engine.embedded.responder import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    Request,
    SmolResponder,
)
from omni_grpc.wire import pb

QUESTION = "what is the capital of france"


def timed(function, *args):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = function(*args)
    return result, (time.perf_counter() - start) * 1000


async def stages(engine: EmbeddedEngine, rows: list[tuple[str, str]], question: str) -> None:
    runtime = engine.runtime
    assert runtime is not None
    scene = speech.Scene().pause(300).speak(question).pause(500)
    pcm = scene.pcm16()
    stream = runtime.vad.stream()
    _, ms = timed(stream.feed, pcm)
    windows = len(pcm) // 1024
    rows.append(("VAD, one 32 ms window", f"{ms / windows:.2f} ms"))
    runs = [timed(runtime.asr.transcribe, pcm) for _ in range(3)]
    rows.append(
        (
            f"ASR, {scene.duration_ms / 1000:.1f} s question (median of 3)",
            f"{statistics.median(ms for _, ms in runs):.0f} ms  -> {runs[0][0]!r}",
        )
    )
    runs = [timed(runtime.asr.hypothesis, pcm) for _ in range(3)]
    rows.append(
        (
            "ASR partial (greedy), the same (median of 3)",
            f"{statistics.median(ms for _, ms in runs):.0f} ms  -> {runs[0][0]!r}",
        )
    )
    if runtime.smol is not None:
        request = Request(
            instructions="",
            turns=[("user", "What is the capital of France?")],
            max_tokens=48,
            temperature=0.0,
            seed=1,
        )
        start = time.perf_counter()
        reply = runtime.smol.reply(request)
        first = None
        text = ""
        async for piece in reply.pieces:
            first = first or time.perf_counter()
            text += piece
        end = time.perf_counter()
        assert first is not None
        rows.append(
            (
                f"LM first token (prompt {reply.prompt_tokens} tokens)",
                f"{(first - start) * 1000:.0f} ms",
            )
        )
        rows.append(
            (
                "LM decode rate",
                f"{(reply.tokens - 1) / (end - first):.1f} tokens/s  -> {text.strip()!r}",
            )
        )
        rows.append(("LM score (scripts/lm_questions.py)", await lm_score(runtime.smol)))
    sentence = "The capital of France is Paris, a city on the Seine."
    start = time.perf_counter()
    audio = await runtime.tts.synthesize(sentence)
    took = time.perf_counter() - start
    rows.append(("TTS, first sentence", f"{took * 1000:.0f} ms for {len(audio) / 48:.0f} ms"))
    rows.append(("TTS real-time factor", f"{took / (len(audio) / 48000):.3f}"))


async def lm_score(smol: SmolResponder) -> str:
    """The share of the question set answered with the expected facts, default settings."""

    async def answer(question: str) -> str:
        request = Request(
            instructions="",
            turns=[("user", question)],
            max_tokens=DEFAULT_MAX_TOKENS,
            temperature=DEFAULT_TEMPERATURE,
            seed=1,
        )
        return "".join([piece async for piece in smol.reply(request).pieces])

    result = await lm_questions.score(answer)
    correct = sum(ok for *_, ok in result.answers)
    return f"{result.score:.2f} ({correct}/{len(result.answers)}) in {result.seconds:.0f} s"


async def one_turn(
    engine: EmbeddedEngine, responder: str, question: str, marks: dict[str, float] | None = None
) -> tuple[float, float, float]:
    """(end of speech -> first audio, speech_stopped -> first audio, ASR+LM+TTS) in ms.

    ``marks``, when given, receives the perf_counter time of ``speech_end`` and of the first
    event of each kind (scripts/bench_voices.py times the stages between them).
    """
    options = struct_pb2.Struct()
    options.update({"responder": responder, "pace": "fast"})
    config = resolve_config(pb.SessionConfig(engine_options=options), Limits(), engine.features)
    session = await engine.open_session("bench", config)
    scene = speech.Scene().pause(300).speak(question).pause(900)
    pcm = scene.pcm16()
    speech_end_byte = int(scene.segments[0][1]) * 32
    marks = {} if marks is None else marks

    async def read() -> None:
        async for event in session.events():
            kind = event.WhichOneof("event")
            marks.setdefault(str(kind), time.perf_counter())
            if kind == "response_done":
                return

    reader = asyncio.create_task(read())
    start = time.perf_counter()
    chunk = 640  # 20 ms
    for seq, offset in enumerate(range(0, len(pcm), chunk), start=1):
        await asyncio.sleep(max(0.0, start + offset / 32000 - time.perf_counter()))
        await session.submit(
            engine_command(
                pb.ConverseRequest(
                    client_seq=seq,
                    append_input_audio=(pb.AppendInputAudio(audio=pcm[offset : offset + chunk])),
                )
            )
        )
        if offset <= speech_end_byte < offset + chunk:
            marks["speech_end"] = time.perf_counter()
    await asyncio.wait_for(reader, 60)
    await session.close()
    first = marks["output_audio_delta"]
    return (
        (first - marks["speech_end"]) * 1000,
        (first - marks["speech_stopped"]) * 1000,
        (first - marks["input_committed"]) * 1000,
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--no-lm", action="store_true", help="skip SmolLM2")
    parser.add_argument("--tts", default="auto", help="the engine's tts option (piper, espeak)")
    parser.add_argument("--asr-model", default="base", help="the engine's asr_model option")
    parser.add_argument("--asr-rescoring", default="auto", help="the engine's option (on, off)")
    parser.add_argument(
        "--wer", default="base rescored,base,tiny.en", help="ASR configurations to score"
    )
    parser.add_argument("--partial-transcripts", default="on", help="the engine's option (off)")
    parser.add_argument("--question", default=QUESTION, help="the words the turns speak")
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []
    engine = EmbeddedEngine(
        {
            "responder": "echo" if args.no_lm else "auto",
            "tts": args.tts,
            "asr_model": args.asr_model,
            "asr_rescoring": args.asr_rescoring,
            "partial_transcripts": args.partial_transcripts,
        }
    )
    start = time.perf_counter()
    await engine.start()
    rows.append(
        ("engine start (models loaded, warmed)", f"{(time.perf_counter() - start) * 1000:.0f} ms")
    )
    await stages(engine, rows, args.question)
    responders = ["echo"] + (
        [] if engine.runtime is None or engine.runtime.smol is None else ["smollm2"]
    )
    for responder in responders:
        results = [await one_turn(engine, responder, args.question) for _ in range(args.turns)]
        for index, label in enumerate(("end of speech", "speech_stopped", "commit")):
            values = [r[index] for r in results]
            rows.append(
                (
                    f"{responder}: {label} -> first audio byte",
                    f"median {statistics.median(values):.0f} ms "
                    f"(min {min(values):.0f}, max {max(values):.0f}, n={len(values)})",
                )
            )
    await engine.stop()
    width = max(len(name) for name, _ in rows)
    print(f"{'stage'.ljust(width)}  figure")
    print(f"{'-' * width}  {'-' * 40}")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    if configs := [name for name in args.wer.split(",") if name]:
        print("\nWord error rate on the speech test set (scripts/bench_hearing.py):")
        print(bench_hearing.table(bench_hearing.measure_configs(configs, speech_set.voices())))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
