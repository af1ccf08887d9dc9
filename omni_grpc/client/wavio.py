"""Reading the talk command's input (WAV or raw pcm16) and writing its reply as WAV.

Input becomes mono pcm16 at a rate the protocol accepts: channels are averaged, 8/24/32-bit
samples are scaled to 16 bits (the layouts are :mod:`omni_grpc.audio`'s), and a rate the server
would refuse is resampled to the canonical input rate (what engines take anyway).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soxr

from omni_grpc.audio.formats import (
    AudioFormatError,
    samples_from_pcm16,
    samples_from_pcm_frames,
    samples_to_pcm16,
)
from omni_grpc.audio.wav import WavError, read_wav, wav_bytes
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, SUPPORTED_RATES_HZ, pcm16_ms

FALLBACK_RATE_HZ = CANONICAL_INPUT_RATE_HZ


class AudioInputError(ValueError):
    """The input file cannot be used; the message says why, for a person."""


@dataclass(frozen=True, slots=True)
class PcmAudio:
    """Mono signed 16-bit little-endian audio."""

    pcm16: bytes
    rate_hz: int

    @property
    def duration_ms(self) -> float:
        return pcm16_ms(len(self.pcm16), self.rate_hz)

    def chunks(self, chunk_ms: int) -> list[bytes]:
        """The audio cut into pieces of ``chunk_ms`` (the last one may be shorter)."""
        step = max(2, self.rate_hz * chunk_ms // 1000 * 2)
        return [self.pcm16[i : i + step] for i in range(0, len(self.pcm16), step)]


def _samples(frames: bytes, width: int, channels: int) -> npt.NDArray[np.float64]:
    try:
        return samples_from_pcm_frames(frames, width, channels)
    except AudioFormatError as error:
        raise AudioInputError(str(error)) from None


def _normalize(samples: npt.NDArray[np.float64], rate_hz: int) -> PcmAudio:
    if rate_hz not in SUPPORTED_RATES_HZ:
        samples = soxr.resample(samples, rate_hz, FALLBACK_RATE_HZ)
        rate_hz = FALLBACK_RATE_HZ
    pcm = samples_to_pcm16(samples)
    if not pcm:
        raise AudioInputError("the input holds no audio")
    return PcmAudio(pcm, rate_hz)


def read_audio(path: str | Path, *, raw_rate_hz: int | None = None) -> PcmAudio:
    """Reads a PCM WAV file, or raw mono pcm16 when ``raw_rate_hz`` is given."""
    path = Path(path)
    try:
        if raw_rate_hz is not None:
            data = path.read_bytes()
            if len(data) % 2:
                raise AudioInputError(f"{path}: raw pcm16 needs an even number of bytes")
            if raw_rate_hz <= 0:
                raise AudioInputError("the raw sample rate must be positive")
            return _normalize(samples_from_pcm16(data).astype(np.float64), raw_rate_hz)
        channels, width, rate, frames = read_wav(path.read_bytes())
    except WavError as error:
        raise AudioInputError(
            f"{path}: not a PCM WAV file ({error}); for raw pcm16 give --raw-rate"
        ) from None
    except OSError as error:
        raise AudioInputError(f"{path}: {error.strerror or error}") from None
    return _normalize(_samples(frames, width, channels), rate)


def write_wav(path: str | Path, pcm16: bytes, rate_hz: int) -> None:
    """Writes mono pcm16 as a WAV file."""
    Path(path).write_bytes(wav_bytes(pcm16, rate_hz))
