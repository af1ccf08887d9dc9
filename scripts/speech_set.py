#!/usr/bin/env python3
"""The speech test set: everyday requests (scripts/speech_set.txt) spoken by several voices.

Used by the benchmark (WER per voice and ASR model) and by the embedded tests, and from the
command line to write the set as WAV files to listen to:

    scripts/speech_set.py OUT_DIR [VOICE ...]

Every clip is made at run time by espeak-ng, so the set costs no data files and is the same on
every machine with the same espeak-ng. A clip is laid out as the engine cuts a turn: 300 ms
before the speech (the default prefix padding) and 500 ms after it (the default silence that
ends a turn). Some voices add white noise at a fixed signal-to-noise ratio, seeded by the voice
and the utterance, so a noisy clip is the same on every run.
"""

from __future__ import annotations

import asyncio
import sys
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import make_test_speech as speech
import numpy as np
import soxr

from omni_grpc.audio.formats import samples_from_pcm16

UTTERANCES_PATH = Path(__file__).with_name("speech_set.txt")
BEFORE_MS = 300.0
AFTER_MS = 500.0


def utterances() -> list[str]:
    """The reference texts, in file order."""
    lines = UTTERANCES_PATH.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


@dataclass(frozen=True, slots=True)
class Voice:
    """A voice of the set: ``speak`` gives clean 16 kHz mono float32 speech; ``snr_db``, when
    set, is the white noise added to every clip, that far below the speech's power."""

    name: str
    speak: Callable[[str], speech.Signal]
    snr_db: float | None = None


def espeak(
    name: str,
    voice: str,
    *,
    words_per_minute: int = 160,
    pitch: int = 50,
    snr_db: float | None = None,
) -> Voice:
    """An espeak-ng voice (a variant after ``+``) at a rate and pitch (50 is its own)."""
    speak = partial(speech.say, voice=voice, words_per_minute=words_per_minute, pitch=pitch)
    return Voice(name, speak, snr_db)


# Accents, a female variant, rate and pitch both ways, and two with noise. espeak-ng's voices
# are robotic but clearly articulated: a recognizer that slips on them will slip on people.
ESPEAK_VOICES: tuple[Voice, ...] = (
    espeak("en-us", "en-us"),
    espeak("en-gb", "en-gb"),
    espeak("en-us+f3", "en-us+f3"),
    espeak("en-gb-x-rp fast high", "en-gb-x-rp", words_per_minute=200, pitch=70),
    espeak("en-us slow low", "en-us", words_per_minute=130, pitch=25),
    espeak("en-us+m3 noise 20 dB", "en-us+m3", snr_db=20.0),
    espeak("en-gb+f2 noise 15 dB", "en-gb+f2", snr_db=15.0),
)


def neural_voices() -> tuple[Voice, ...]:
    """The engine's neural voice (Piper's "joe") when it is installed. Its model samples noise
    as it speaks, so its clips, unlike espeak-ng's, differ a little from run to run."""
    from omni_grpc.engine.embedded.models.piper_voice import VoiceMissing, find_joe

    try:
        find_joe()
    except VoiceMissing:
        return ()
    return (Voice("piper joe", _piper_say),)


@cache
def _piper() -> object:
    from omni_grpc.engine.embedded.models.piper_voice import PiperVoice, find_joe

    return PiperVoice(*find_joe(), ThreadPoolExecutor(1))


def _piper_say(text: str) -> speech.Signal:
    """Piper's speech at 16 kHz. It synthesizes in an event loop of its own, on a thread, so
    a caller inside a running loop (an async test) can make clips too."""
    voice: Any = _piper()
    with ThreadPoolExecutor(1) as thread:
        pcm = thread.submit(asyncio.run, voice.synthesize(text)).result()
    samples = samples_from_pcm16(pcm)
    return np.asarray(soxr.resample(samples, 24000, speech.RATE_HZ), dtype=np.float32)


def voices() -> tuple[Voice, ...]:
    """Every voice of the set: the espeak-ng ones, then any neural one."""
    return (*ESPEAK_VOICES, *neural_voices())


@dataclass(frozen=True, slots=True)
class Clip:
    """One utterance by one voice, laid out as the engine cuts a turn."""

    index: int
    text: str
    voice: str
    signal: speech.Signal

    def pcm16(self, gain_db: float = 0.0) -> bytes:
        """The clip as canonical input; ``gain_db`` below 0 is a quieter microphone."""
        louder = self.signal * 10 ** (gain_db / 20)
        return (np.clip(louder, -1.0, 1.0) * 32767).astype("<i2").tobytes()  # as the scenes


def clip(voice: Voice, index: int, text: str) -> Clip:
    """``text`` (utterance ``index``) spoken by ``voice``, with the turn's silence around it
    and the voice's noise over the whole clip."""
    spoken = voice.speak(text)
    start_ms, end_ms = speech.speech_edges_ms(spoken)
    rate = speech.RATE_HZ
    signal = np.concatenate(
        [
            speech.silence(BEFORE_MS),
            spoken[int(start_ms * rate / 1000) : int(end_ms * rate / 1000)],
            speech.silence(AFTER_MS),
        ]
    )
    if voice.snr_db is not None:
        signal = add_noise(signal, voice.snr_db, seed=zlib.crc32(f"{voice.name}/{index}".encode()))
    return Clip(index=index, text=text, voice=voice.name, signal=signal.astype(np.float32))


def add_noise(signal: speech.Signal, snr_db: float, *, seed: int) -> speech.Signal:
    """``signal`` with white noise ``snr_db`` below the power of its speech (its silence left
    out, so the ratio does not depend on the pauses around the words)."""
    loud = signal[np.abs(signal) > 0.02]
    power = float(np.mean(loud**2)) if loud.size else 0.0
    level = np.sqrt(power / 10 ** (snr_db / 10))
    noise = np.random.default_rng(seed).normal(0.0, level, signal.size)
    return (signal + noise).astype(np.float32)


def clips(voice: Voice, indices: Sequence[int] | None = None) -> list[Clip]:
    """The set (or the utterances at ``indices``) spoken by ``voice``."""
    texts = utterances()
    chosen = range(len(texts)) if indices is None else indices
    return [clip(voice, index, texts[index]) for index in chosen]


def main(argv: list[str]) -> int:
    if not argv or not speech.espeak_available():
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    wanted = set(argv[1:])
    for voice in voices():
        if wanted and voice.name not in wanted:
            continue
        folder = out / voice.name.replace(" ", "_")
        folder.mkdir(parents=True, exist_ok=True)
        for item in clips(voice):
            speech.write_wav(folder / f"{item.index:02d}.wav", item.signal)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
