#!/usr/bin/env python3
"""Makes test speech with espeak-ng: real words, known text, known timing.

Used by the embedded engine's tests and benchmark (imported), and from the command line to
write WAV files to listen to:

    scripts/make_test_speech.py OUT_DIR            writes the standard scenes as 16 kHz WAVs
    scripts/make_test_speech.py OUT.wav "text"     writes one phrase

A *scene* is silence, phrases and noise laid end to end, at 16 kHz mono float32, together
with where each phrase's speech truly starts and ends (measured on the synthesized signal,
not assumed), so tests can hold VAD and barge-in timing to the audio itself.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soxr

from omni_grpc.audio.formats import samples_from_pcm16

RATE_HZ = 16000
Signal = npt.NDArray[np.float32]
# A sample counts as speech above this level (about -34 dBFS); espeak-ng's output has clean
# digital silence around words, so this finds the true edges.
_SPEECH_LEVEL = 0.02


def espeak_available() -> bool:
    """Whether the espeak-ng program is installed."""
    return shutil.which("espeak-ng") is not None


def say(
    text: str,
    *,
    voice: str = "en-us",
    words_per_minute: int = 160,
    pitch: int = 50,
    rate_hz: int = RATE_HZ,
    ssml: bool = False,
) -> Signal:
    """espeak-ng speaking ``text``, as mono float32 at ``rate_hz``; ``pitch`` is espeak-ng's
    0 to 99 (50 is the voice's own); ``ssml``: ``text`` is SSML (``<speak>...</speak>``, with
    ``<prosody>`` to draw a word out)."""
    command = ["espeak-ng", "-v", voice, "-s", str(words_per_minute), "-p", str(pitch)]
    command += ["-m", "--stdout"] if ssml else ["--stdout"]
    wav = subprocess.run(
        command,
        input=text.encode(),
        capture_output=True,
        check=True,
    ).stdout
    with wave.open(io.BytesIO(wav)) as reader:
        source_rate = reader.getframerate()
        frames = reader.readframes(reader.getnframes())
    samples = samples_from_pcm16(frames)
    if source_rate == rate_hz:
        return samples
    return np.asarray(soxr.resample(samples, source_rate, rate_hz), dtype=np.float32)


def speech_edges_ms(samples: Signal, rate_hz: int = RATE_HZ) -> tuple[float, float]:
    """Where the speech in ``samples`` truly starts and ends, in milliseconds."""
    loud = np.nonzero(np.abs(samples) > _SPEECH_LEVEL)[0]
    if loud.size == 0:
        raise ValueError("no speech in the signal")
    return loud[0] * 1000 / rate_hz, (loud[-1] + 1) * 1000 / rate_hz


def silence(ms: float, rate_hz: int = RATE_HZ) -> Signal:
    return np.zeros(int(rate_hz * ms / 1000), np.float32)


def noise(ms: float, *, level: float = 0.1, seed: int = 0, rate_hz: int = RATE_HZ) -> Signal:
    """White noise: what a burst of static or a knock sounds like to a VAD."""
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, level, int(rate_hz * ms / 1000)).astype(np.float32)


@dataclass
class Scene:
    """A signal and the true speech segments in it (start_ms, end_ms, text)."""

    signal: Signal = field(default_factory=lambda: np.zeros(0, np.float32))
    segments: list[tuple[float, float, str]] = field(default_factory=list)
    rate_hz: int = RATE_HZ

    @property
    def duration_ms(self) -> float:
        return self.signal.size * 1000 / self.rate_hz

    def add(self, part: Signal) -> Scene:
        self.signal = np.concatenate([self.signal, part]).astype(np.float32)
        return self

    def pause(self, ms: float) -> Scene:
        return self.add(silence(ms, self.rate_hz))

    def speak(self, text: str, **kwargs: object) -> Scene:
        phrase = say(text, rate_hz=self.rate_hz, **kwargs)  # type: ignore[arg-type]
        return self.add_speech(phrase, text)

    def add_speech(self, phrase: Signal, text: str) -> Scene:
        """Adds speech made elsewhere (``text``: its words), with its true edges."""
        start, end = speech_edges_ms(phrase, self.rate_hz)
        self.segments.append((self.duration_ms + start, self.duration_ms + end, text))
        return self.add(phrase)

    def pcm16(self) -> bytes:
        # Not omni_grpc.audio's scale: x 32767, truncated, is how the test speech was made and
        # its figures measured (docs/engines.md); rounding would change the bytes of every clip.
        return (np.clip(self.signal, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def write_wav(path: Path, samples: Signal, rate_hz: int = RATE_HZ) -> None:
    with wave.open(str(path), "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(rate_hz)
        # Scaled as Scene.pcm16 scales (see there).
        writer.writeframes((np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes())


def standard_scenes() -> dict[str, Scene]:
    """The scenes the tests use, by name."""
    return {
        "question": Scene().pause(600).speak("what is the capital of france").pause(900),
        "two_turns": (
            Scene()
            .pause(1000)
            .speak("turn off the radio, please")
            .pause(1500)
            .speak("please turn on the kitchen lights")
            .pause(1000)
        ),
        "noise_bursts": Scene()
        .pause(500)
        .add(noise(100))
        .pause(600)
        .add(noise(100, seed=1))
        .pause(600),
    }


def main(argv: list[str]) -> int:
    if not espeak_available():
        print("espeak-ng is not installed", file=sys.stderr)
        return 1
    if len(argv) == 2 and argv[0].endswith(".wav"):
        write_wav(Path(argv[0]), say(argv[1]))
        return 0
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, scene in standard_scenes().items():
        write_wav(out / f"{name}.wav", scene.signal)
        for start, end, text in scene.segments:
            print(f"{name}.wav  {start:8.1f} - {end:8.1f} ms  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
