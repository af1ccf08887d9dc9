#!/usr/bin/env python3
"""How well the embedded engine hears: word error rate on the speech test set, per voice and
per ASR configuration (model and decoding), next to the time each transcription takes.

    .venv/bin/python scripts/bench_hearing.py [--configs NAME,...] [--voices NAME,...]
                                              [--errors FILE] [--gain-db DB]

Every clip of the set (scripts/speech_set.py: each request in each voice, cut as the engine
cuts a turn) is transcribed by the same Transcriber the engine runs, on the engine's two
threads, one clip at a time. The time is the transcription's wall time: what a turn waits
between the end of its speech (the silence that ends it, which the engine does not wait out
before it starts transcribing) and its transcript. scripts/bench_embedded.py prints this table
too, for the models the engine offers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import speech_set
import word_error_rate

from omni_grpc.engine.embedded.models import rescoring
from omni_grpc.engine.embedded.models.asr import WINDOW_FRAMES, Decoding, Transcriber
from omni_grpc.engine.embedded.models.lm import SmolLM, find_smollm2

FALLBACK = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # Whisper's own temperatures
# Fixed initial prompts tried: generic, each without any word of speech_set.txt (a test checks
# it), chosen on the even lines of the set and reported on both halves.
PROMPTS = {
    "hello": "Hello.",
    "errands": "Hello. Okay, sure: quick questions, simple chores, small errands.",
    "glad": "Hey there. Sure, glad; ask anything, anytime.",
}
# The configurations measured for docs/engines.md. "base" and "tiny.en" are the engine's
# decoding (a beam of 5, the turn's log-mel padded with zeros to 10 s); the others change one
# thing.
CONFIGS: dict[str, tuple[str, Decoding]] = {
    "base": ("base", Decoding()),
    "base greedy": ("base", Decoding(beam_size=1)),
    "base silence-padded": ("base", Decoding(silence_padding=True)),
    "base 30 s": ("base", Decoding(window_frames=WINDOW_FRAMES)),
    "base greedy fallback": ("base", Decoding(beam_size=1, temperatures=FALLBACK)),
    "base greedy prompt": ("base", Decoding(beam_size=1, prompt=True)),
    "base unlevelled": ("base", Decoding(level_dbfs=None)),
    "base no-speech 0.8": ("base", Decoding(no_speech_threshold=0.8)),
    "base timestamps": ("base", Decoding(timestamps=True)),
    "base patience 2": ("base", Decoding(patience=2.0)),
    "base repetition 1.1": ("base", Decoding(repetition_penalty=1.1)),
    "base trailing 200 ms": ("base", Decoding(trailing_ms=200.0)),
    **{f"base prompt {n}": ("base", Decoding(initial_prompt=p)) for n, p in PROMPTS.items()},
    "tiny.en": ("tiny.en", Decoding()),
    "tiny.en greedy": ("tiny.en", Decoding(beam_size=1)),
    "tiny.en silence-padded": ("tiny.en", Decoding(silence_padding=True)),
    "tiny.en 30 s": ("tiny.en", Decoding(window_frames=WINDOW_FRAMES)),
}
# The configurations whose beam readings SmolLM2 re-ranks (omni_grpc/engine/embedded/
# rescoring.py), at these weights of its score; "base rescored" is the engine's default when
# the language model is loaded (its beam, RESCORED_BEAM, 8).
RESCORED = {
    "base rescored": rescoring.LM_WEIGHT,
    "base beam 5 rescored": rescoring.LM_WEIGHT,
    "base beam 5 rescored 0.3": 0.3,
    "base beam 5 rescored 1.0": 1.0,
    "base beam 10 rescored": rescoring.LM_WEIGHT,
    "tiny.en rescored": rescoring.LM_WEIGHT,
    "base rescored prompt": rescoring.LM_WEIGHT,
    **{f"base rescored prompt {n}": rescoring.LM_WEIGHT for n in PROMPTS},
}
_RESCORED_BEAM = Decoding(beam_size=rescoring.RESCORED_BEAM)
CONFIGS.update(
    {
        "base rescored": ("base", _RESCORED_BEAM),
        "base beam 5 rescored": ("base", Decoding(beam_size=5)),
        "base beam 5 rescored 0.3": ("base", Decoding(beam_size=5)),
        "base beam 5 rescored 1.0": ("base", Decoding(beam_size=5)),
        "base beam 10 rescored": ("base", Decoding(beam_size=10)),
        "tiny.en rescored": ("tiny.en", _RESCORED_BEAM),
        "base rescored prompt": ("base", Decoding(beam_size=rescoring.RESCORED_BEAM, prompt=True)),
        **{
            f"base rescored prompt {n}": (
                "base",
                Decoding(beam_size=rescoring.RESCORED_BEAM, initial_prompt=p),
            )
            for n, p in PROMPTS.items()
        },
    }
)


ESPEAK_NAMES = frozenset(voice.name for voice in speech_set.ESPEAK_VOICES)
NONE = word_error_rate.Score(0, 0)


@dataclass
class Measured:
    """One configuration's errors per voice and the time of every transcription."""

    config: str
    scores: dict[str, word_error_rate.Score] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)
    misheard: list[tuple[str, str, str]] = field(default_factory=list)  # voice, said, heard
    # The espeak-ng voices' score over the set's even and odd lines (0 and 1): a choice made
    # on one half is checked on the other.
    halves: dict[int, word_error_rate.Score] = field(default_factory=dict)

    def overall(self) -> word_error_rate.Score:
        return sum(self.scores.values(), word_error_rate.Score(0, 0))

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.seconds)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(
    transcriber: Transcriber,
    config: str,
    clips: dict[str, list[speech_set.Clip]],
    gain_db: float = 0.0,
) -> Measured:
    """Transcribes every clip; each voice's clips run in order as one conversation, so the
    previous transcripts are there for a decoding that prompts with them."""
    measured = Measured(config)
    for voice, voice_clips in clips.items():
        pairs = []
        previous: list[str] = []
        for clip in voice_clips:
            start = time.perf_counter()
            heard = transcriber.transcribe(clip.pcm16(gain_db), " ".join(previous[-2:]))
            measured.seconds.append(time.perf_counter() - start)
            previous.append(heard)
            pairs.append((clip.text, heard))
            scored = word_error_rate.score(clip.text, heard)
            if voice in ESPEAK_NAMES:
                half = clip.index % 2
                measured.halves[half] = measured.halves.get(half, NONE) + scored
            if scored.errors:
                measured.misheard.append((voice, clip.text, heard))
        measured.scores[voice] = word_error_rate.total(pairs)
    return measured


def measure_configs(
    configs: Sequence[str],
    voices: Sequence[speech_set.Voice],
    threads: int = 2,
    gain_db: float = 0.0,
) -> list[Measured]:
    """Each configuration over the set in ``voices``; a model is loaded once for all of its
    decodings."""
    clips = {voice.name: speech_set.clips(voice) for voice in voices}
    loaded: dict[str, Transcriber] = {}
    lm: SmolLM | None = None
    results = []
    for config in configs:
        model, decoding = CONFIGS[config]
        if model not in loaded:
            loaded[model] = Transcriber(model=model, cpu_threads=threads)
            loaded[model].transcribe(bytes(32000))  # CTranslate2's first-call warm-up
        transcriber = loaded[model]
        transcriber.decoding = decoding
        transcriber.reranker = None
        if config in RESCORED:
            lm = lm or SmolLM(find_smollm2())
            transcriber.reranker = rescoring.LmRescorer(lm, RESCORED[config])
        results.append(measure(transcriber, config, clips, gain_db))
    return results


def table(results: Sequence[Measured]) -> str:
    """Rows of configurations: WER over the espeak-ng voices and over each voice, time."""
    voices = list(results[0].scores)
    head = ["config", "WER espeak", "even", "odd", *voices, "median ms", "p90 ms"]
    rows = [head]
    for result in results:
        pooled = sum((s for v, s in result.scores.items() if v in ESPEAK_NAMES), NONE)
        rows.append(
            [
                result.config,
                f"{100 * pooled.rate:.1f} %",
                *(f"{100 * result.halves.get(half, NONE).rate:.1f}" for half in (0, 1)),
                *(f"{100 * result.scores[v].rate:.1f}" for v in voices),
                f"{statistics.median(result.seconds) * 1000:.0f}",
                f"{result.percentile_ms(0.9):.0f}",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    words = results[0].overall().words
    note = (
        f"(WER per voice in %, {words} words per configuration; even and odd: the espeak-ng"
        " voices on the set's even and odd lines)"
    )
    return "\n".join([*lines, note])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS), help="names from CONFIGS")
    parser.add_argument("--voices", default="", help="voice names (default: all)")
    parser.add_argument("--errors", default="", help="write every misheard clip to this file")
    parser.add_argument(
        "--gain-db", type=float, default=0.0, help="every clip this much louder (a quiet mic: -20)"
    )
    args = parser.parse_args()
    configs = [name for name in args.configs.split(",") if name]
    wanted = {name for name in args.voices.split(",") if name}
    voices = [v for v in speech_set.voices() if not wanted or v.name in wanted]
    results = measure_configs(configs, voices, gain_db=args.gain_db)
    print(table(results))
    if args.errors:
        with open(args.errors, "w", encoding="utf-8") as out:
            for result in results:
                for voice, said, heard in result.misheard:
                    out.write(f"{result.config}\t{voice}\t{said}\t{heard}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
