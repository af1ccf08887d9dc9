"""WAV files, in one place: the header the recordings and exports write, and the two readers.

The rules held here:

* **Only 16-bit PCM is written**: mono (a talk run's output) or stereo (a recording's two
  tracks), with the 44-byte canonical header (:func:`wav_header`), so a file's size says its
  length and a recording can rewrite its header in place as it grows.
* **Two readers, for two kinds of file.** :func:`read_wav` reads a whole file as the standard
  library's ``wave`` does (any PCM width and channel count; the caller makes samples of them);
  :func:`read_streamed_wav` reads a pcm16 WAV whose writer streamed it and so could not fill in
  the sizes (espeak-ng's on a pipe), walking its chunks to the samples.
* **One error**: anything that is not such a file raises :class:`WavError` (a ``ValueError``).
"""

from __future__ import annotations

import io
import struct
import wave
from typing import NamedTuple

HEADER_BYTES = 44
SAMPLE_WIDTH = 2  # pcm16


class WavError(ValueError):
    """The bytes are not a WAV file this module reads."""


class WavAudio(NamedTuple):
    """A WAV file's samples as they lie in it, with what it says of them."""

    channels: int
    sample_width: int
    rate_hz: int
    frames: bytes


def wav_header(rate_hz: int, frames: int, channels: int = 1) -> bytes:
    """The 44-byte header of a 16-bit PCM WAV of ``frames`` frames of ``channels``."""
    block = channels * SAMPLE_WIDTH
    data = frames * block
    fmt = struct.pack("<IHHIIHH", 16, 1, channels, rate_hz, rate_hz * block, block, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data)
        + b"WAVEfmt "
        + fmt
        + b"data"
        + struct.pack("<I", data)
    )


def wav_bytes(pcm16: bytes, rate_hz: int, channels: int = 1) -> bytes:
    """A whole 16-bit PCM WAV file of ``pcm16`` (its frames interleaved when stereo)."""
    frames = len(pcm16) // (channels * SAMPLE_WIDTH)
    return wav_header(rate_hz, frames, channels) + pcm16


def read_wav(data: bytes) -> WavAudio:
    """The samples of a PCM WAV file, as they lie in it; WavError for anything else."""
    try:
        with wave.open(io.BytesIO(data), "rb") as wav:
            channels, width, rate = wav.getnchannels(), wav.getsampwidth(), wav.getframerate()
            frames = wav.readframes(wav.getnframes())
    except (wave.Error, EOFError) as error:
        raise WavError(str(error) or "a truncated WAV file") from None
    return WavAudio(channels, width, rate, frames)


def read_streamed_wav(data: bytes) -> tuple[int, bytes]:
    """(rate, pcm16 samples) of a WAV whose header has no true sizes: the data chunk runs to the
    end of the bytes (cut to whole samples); WavError when there is no such chunk."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise WavError("not a WAV file")
    offset, rate = 12, 0
    while offset + 8 <= len(data):
        chunk, size = (
            data[offset : offset + 4],
            struct.unpack("<I", data[offset + 4 : offset + 8])[0],
        )
        if chunk == b"fmt ":
            rate = struct.unpack("<I", data[offset + 12 : offset + 16])[0]
        elif chunk == b"data":
            samples = data[offset + 8 :]
            return rate, samples[: len(samples) - len(samples) % SAMPLE_WIDTH]
        offset += 8 + size
    raise WavError("a WAV file without samples")


__all__ = [
    "HEADER_BYTES",
    "WavAudio",
    "WavError",
    "read_streamed_wav",
    "read_wav",
    "wav_bytes",
    "wav_header",
]
