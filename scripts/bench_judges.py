#!/usr/bin/env python3
"""Measures the judges of a turn's end on the turn-taking set, each alone and combined.

    .venv/bin/python scripts/bench_judges.py [--part tuning|held-out|all] [--weights 0,0.5,1]

Offline and load-free: each complete request and hesitation of the set (scripts/turn_set.py)
goes through the engine's own server VAD under semantic detection (Silero, the kit's
listener), and every pause it reports is judged as the engine judges it: Smart Turn on the
turn's audio up to the pause, SmolLM2 on the transcript of it (Whisper base's beam, re-ranked
by SmolLM2, as the engine writes a turn down). Then, for
each weight of the sound (0: the words alone, 1: the sound alone; the engine's is
``end_of_turn.SOUND_WEIGHT``), the wait eagerness ``auto`` chooses at each pause says what a
listener gets, assuming judgements take no time (their time is printed apart, and on a loaded
machine is what the real-time benchmark, scripts/bench_turns.py, adds):

* a hesitation is **answered at its pause** when the wait there is shorter than the pause;
* a complete request's **wait** is the one chosen at its end; **left waiting** counts those
  over 1 s; **cut** counts complete requests ended at a pause inside them.

``--part held-out`` scores the part of the set no tuning looked at (turn_set.HELD_OUT); the
weights were chosen on ``tuning`` alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from turn_set import Dialogue, dialogues

from omni_grpc.engine.kit.end_of_turn import WAITS, wait_ms
from omni_grpc.engine.kit.listening import Listener, Pause
from omni_grpc.engine.kit.vad import WINDOW_MS
from omni_grpc.wire import pb

CHUNK_MS = 100
LEFT_WAITING_MS = 1000.0


@dataclass(frozen=True, slots=True)
class Judged:
    """One pause: where, the silence that followed it (inf: the end), and the verdicts."""

    dialogue: Dialogue
    pause_ms: float
    silence_after_ms: float
    reading: str
    sound: float
    words: float
    sound_s: float
    words_s: float  # the transcript and its judgement


def pauses(dialogue: Dialogue, listener: Listener) -> list[tuple[Pause, float]]:
    """Each pause the engine's VAD reports in the dialogue, with the silence that followed it
    as the VAD hears it (until speech went on; inf: it never did), window by window."""
    pcm = dialogue.before.pcm16()
    step = round(WINDOW_MS) * 32  # one Silero window of PCM16 at 16 kHz
    found: list[tuple[Pause, float]] = []
    waiting: Pause | None = None
    for start in range(0, len(pcm), step):
        chunk = pcm[start : start + step]
        for event in listener.advance(chunk, listener.scores(chunk)):
            if isinstance(event, Pause):
                waiting = event
        if waiting is not None and listener.speaking and not listener.detector.in_silence:
            found.append((waiting, listener.buffer.clock_ms - waiting.speech_end_ms))
            waiting = None
    if waiting is not None:
        found.append((waiting, float("inf")))
    return found


def judge_all(part: str) -> list[Judged]:
    from omni_grpc.engine.embedded.end_of_turn import SmolTurnScorer
    from omni_grpc.engine.embedded.models.asr import Decoding, Transcriber
    from omni_grpc.engine.embedded.models.lm import SmolLM, find_smollm2
    from omni_grpc.engine.embedded.models.rescoring import RESCORED_BEAM, LmRescorer
    from omni_grpc.engine.embedded.models.smart_turn import SmartTurn
    from omni_grpc.engine.kit.vad import SileroVad

    vad, ear = SileroVad(), SmartTurn()
    lm = SmolLM(find_smollm2())
    reader = SmolTurnScorer(lm)
    asr = Transcriber(
        model="base",
        cpu_threads=2,
        decoding=Decoding(beam_size=RESCORED_BEAM),
        reranker=LmRescorer(lm),
    )
    detection = pb.TurnDetection(
        type=pb.TURN_DETECTION_TYPE_SEMANTIC_VAD, eagerness=pb.EAGERNESS_AUTO, threshold=0.5
    )
    out = []
    for dialogue in dialogues(part=part):
        if dialogue.kind not in ("complete", "hesitation"):
            continue
        listener = Listener(vad, detection, 64.0, 120_000.0)
        for pause, after in pauses(dialogue, listener):
            began = time.perf_counter()
            sound = ear.probability(pause.audio)
            heard = time.perf_counter()
            reading = asr.transcribe(pause.audio)
            words = reader.probability(reading) if reading.strip() else 0.0
            read = time.perf_counter()
            judged = Judged(
                dialogue, pause.speech_end_ms, after, reading, sound, words,
                heard - began, read - heard,
            )  # fmt: skip
            print(
                f"  {dialogue.kind:10} {dialogue.name[:40]:40} pause {pause.speech_end_ms:6.0f}"
                f" then {after:6.0f} ms  sound {sound:.2f} words {words:.2f}  {reading!r}",
                file=sys.stderr,
            )
            out.append(judged)
    return out


def score(judged: list[Judged], weight: float) -> list[str]:
    waits = WAITS[pb.EAGERNESS_AUTO]
    early: dict[str, bool] = {}  # per dialogue: ended at a pause inside it
    end_wait: dict[str, float] = {}
    kinds: dict[str, Dialogue] = {}
    for j in judged:
        name = j.dialogue.name
        kinds[name] = j.dialogue
        wait = wait_ms(weight * j.sound + (1 - weight) * j.words, waits)
        if j.silence_after_ms == float("inf"):
            end_wait[name] = wait
        elif wait < j.silence_after_ms:
            early[name] = True
    hesitations = [d for d in kinds.values() if d.kind == "hesitation"]
    judged_ones = [d for d in hesitations if d.judged_pause]
    complete = [d for d in kinds.values() if d.kind == "complete"]
    answered = sum(early.get(d.name, False) for d in judged_ones)
    answered_all = sum(early.get(d.name, False) for d in hesitations)
    complete_waits = [end_wait[d.name] for d in complete if d.name in end_wait]
    left = sum(w > LEFT_WAITING_MS for w in complete_waits)
    cut = sum(early.get(d.name, False) for d in complete)
    median = statistics.median(complete_waits) if complete_waits else float("nan")
    return [
        f"{weight:.2f}",
        f"{answered}/{len(judged_ones)} ({answered_all}/{len(hesitations)} of all)",
        f"{median:.0f}",
        f"{max(complete_waits, default=float('nan')):.0f}",
        f"{left}/{len(complete_waits)}",
        f"{cut}/{len(complete)}",
    ]


HEADER = (
    "sound weight",
    "hesitations <= 1.2 s answered at the pause",
    "complete: median wait (ms)",
    "longest wait (ms)",
    "left waiting > 1 s",
    "cut inside",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("tuning", "held-out", "all"), default="tuning")
    parser.add_argument("--weights", default="0,0.25,0.5,0.75,1")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    judged = judge_all(args.part)
    print(f"the {args.part} part of the set; eagerness auto; judgements taken as instant\n")
    print("| " + " | ".join(HEADER) + " |")
    print("|" + " --- |" * len(HEADER))
    for weight in (float(w) for w in args.weights.split(",")):
        print("| " + " | ".join(score(judged, weight)) + " |")
    sound_ms = statistics.median(j.sound_s for j in judged) * 1000
    words_ms = statistics.median(j.words_s for j in judged) * 1000
    print(
        f"\nmedian time per pause: Smart Turn {sound_ms:.0f} ms; the transcript and"
        f" SmolLM2 {words_ms:.0f} ms; load average {load:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after (1 min)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
