#!/usr/bin/env python3
"""What noise reduction costs per chunk, and what it does to the words Whisper hears.

    .venv/bin/python scripts/bench_denoise.py [--part cost|wer|both] [--snr-db 0,5]
                                              [--clips 20] [--voices NAME,...] [--wav-dir DIR]

**cost**: 30 s of noisy speech from the speech set, appended in chunks of 20 ms and of 100 ms
to one :class:`~omni_grpc.engine.kit.denoise.Denoiser` per type (a session's own), each chunk
timed: microseconds per chunk (wall and the thread's CPU time, which a loaded machine inflates
less) and the share of one core it takes at real time (its CPU time over the audio's). Beside
it, the same chunks fed to a Silero VAD stream, the embedded session's other per-chunk work on
the input (the detector the denoised audio goes to).

**wer**: utterances of the speech set (scripts/speech_set.py) in its clean voices (espeak-ng's,
and Piper's "joe" where it is installed),
white noise added at each ``--snr-db`` (seeded, as the set's noisy voices are), transcribed by
the embedded engine's Whisper base (its Transcriber, as bench_hearing.py runs it) as they are,
and after each noise reduction type (a fresh denoiser per clip, fed 20 ms at a time, as a
session is). The clean clips are transcribed too, for the floor. ``--wav-dir`` writes the first
clip of each condition as a WAV to listen to.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import zlib
from pathlib import Path

import make_test_speech as speech
import numpy as np
import speech_set
import word_error_rate

from omni_grpc.engine.kit.denoise import Denoiser
from omni_grpc.wire import pb

TYPES = {
    "near_field": pb.NOISE_REDUCTION_TYPE_NEAR_FIELD,
    "far_field": pb.NOISE_REDUCTION_TYPE_FAR_FIELD,
}
RATE = speech.RATE_HZ
CHUNKS_MS = (20, 100)


def noisy(clip: speech_set.Clip, snr_db: float) -> np.ndarray:
    seed = zlib.crc32(f"denoise/{clip.voice}/{clip.index}/{snr_db}".encode())
    return speech_set.add_noise(clip.signal, snr_db, seed=seed)


def pcm16(signal: np.ndarray) -> bytes:
    return (np.clip(signal, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def denoised(pcm: bytes, kind: pb.NoiseReductionType.ValueType, chunk_ms: int = 20) -> bytes:
    """``pcm`` through a fresh denoiser, ``chunk_ms`` at a time, as a session appends it."""
    denoiser = Denoiser(kind)
    step = chunk_ms * RATE // 1000 * 2
    out = b"".join(denoiser.process(pcm[i : i + step]) for i in range(0, len(pcm), step))
    denoiser.close()
    return out


def _timed(feed, pcm: bytes, chunk_ms: int) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    """Each chunk's wall time and the thread's CPU time in it, in microseconds: on a loaded
    machine the wall time counts the waits for a core, the CPU time only the work."""
    step = chunk_ms * RATE // 1000 * 2
    walls, cpus = [], []
    for start in range(0, len(pcm) - step + 1, step):
        chunk = pcm[start : start + step]
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        feed(chunk)
        walls.append((time.perf_counter_ns() - wall) / 1000)
        cpus.append((time.thread_time_ns() - cpu) / 1000)
    return walls, cpus


def cost(seconds: float) -> None:
    voice = speech_set.ESPEAK_VOICES[0]
    signal = np.concatenate([noisy(c, 5.0) for c in speech_set.clips(voice, range(12))])
    signal = np.resize(signal, int(seconds * RATE))
    pcm = pcm16(signal)
    rows = []
    for chunk_ms in CHUNKS_MS:
        feeds = {name: Denoiser(kind).process for name, kind in TYPES.items()}
        try:
            from omni_grpc.engine.kit.vad import SileroVad

            feeds["silero vad (beside)"] = SileroVad().stream().feed
        except Exception as error:  # no faster-whisper here: the denoiser alone
            print(f"(no Silero VAD: {error})", file=sys.stderr)
        for name, feed in feeds.items():
            _timed(feed, pcm[: RATE * 2], chunk_ms)  # warm: caches, first allocations
            walls, cpus = _timed(feed, pcm, chunk_ms)
            real_time = len(cpus) * chunk_ms * 1000
            rows.append(
                (
                    f"{chunk_ms} ms",
                    name,
                    f"{statistics.median(walls):.0f}",
                    f"{sorted(walls)[int(0.99 * len(walls))]:.0f}",
                    f"{statistics.median(cpus):.0f}",
                    f"{statistics.fmean(cpus):.0f}",
                    f"{100 * sum(cpus) / real_time:.2f} %",
                )
            )
    head = (
        "chunk",
        "work",
        "wall median us",
        "wall p99 us",
        "CPU median us",
        "CPU mean us",
        "CPU share of a core",
    )
    _print_table(head, rows)
    print(f"({seconds:g} s of audio per row, one chunk at a time, on one thread)")


def wer(snrs: list[float], count: int, voice_names: set[str], wav_dir: Path | None) -> None:
    from omni_grpc.engine.embedded.models.asr import Transcriber

    voices = [
        v
        for v in speech_set.voices()
        if v.snr_db is None and (not voice_names or v.name in voice_names)
    ]
    clips = [c for v in voices for c in speech_set.clips(v, range(count))]
    transcriber = Transcriber(model="base", cpu_threads=2)
    transcriber.transcribe(bytes(32000))  # CTranslate2's first-call warm-up
    conditions: dict[str, list[tuple[str, str]]] = {}

    def hear(name: str, clip: speech_set.Clip, pcm: bytes) -> None:
        conditions.setdefault(name, []).append((clip.text, transcriber.transcribe(pcm, "")))
        if wav_dir is not None and len(conditions[name]) == 1:
            wav_dir.mkdir(parents=True, exist_ok=True)
            samples = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768
            speech.write_wav(wav_dir / f"{name.replace(' ', '_')}.wav", samples)

    for clip in clips:
        hear("clean", clip, clip.pcm16())
        for snr in snrs:
            raw = pcm16(noisy(clip, snr))
            hear(f"{snr:g} dB off", clip, raw)
            for type_name, kind in TYPES.items():
                hear(f"{snr:g} dB {type_name}", clip, denoised(raw, kind))
    rows = []
    for name, pairs in conditions.items():
        score = word_error_rate.total(pairs)
        rows.append((name, f"{100 * score.rate:.1f} %", str(score.errors), str(score.words)))
    _print_table(("condition", "WER", "errors", "words"), rows)
    names = ", ".join(v.name for v in voices)
    print(f"({len(clips)} clips: {count} utterances in each of {names}; Whisper base)")


def _print_table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    table = [head, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for index, row in enumerate(table):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        if index == 0:
            print("  ".join("-" * w for w in widths))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("cost", "wer", "both"), default="both")
    parser.add_argument("--seconds", type=float, default=30.0, help="audio per cost row")
    parser.add_argument("--snr-db", default="0,5", help="noise levels under the speech")
    parser.add_argument("--clips", type=int, default=20, help="utterances per voice")
    parser.add_argument("--voices", default="", help="clean voice names (default all)")
    parser.add_argument("--wav-dir", default="", help="write a WAV of each condition here")
    args = parser.parse_args()
    if not speech.espeak_available():
        print("espeak-ng is needed for the test speech", file=sys.stderr)
        return 2
    if args.part in ("cost", "both"):
        cost(args.seconds)
    if args.part in ("wer", "both"):
        snrs = [float(s) for s in args.snr_db.split(",") if s]
        voices = {name for name in args.voices.split(",") if name}
        wer(snrs, args.clips, voices, Path(args.wav_dir) if args.wav_dir else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
