"""WAV files: the header written, the whole-file reader and the streamed-file reader."""

from __future__ import annotations

import io
import struct
import wave

import numpy as np
import pytest

from omni_grpc.audio.wav import (
    HEADER_BYTES,
    WavError,
    read_streamed_wav,
    read_wav,
    wav_bytes,
    wav_header,
)


def _pcm16(frames: int, channels: int) -> bytes:
    rng = np.random.default_rng(3)
    return rng.integers(-32768, 32767, frames * channels, dtype=np.int16).tobytes()


def _stdlib_wav(pcm16: bytes, rate_hz: int, channels: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(2)
        writer.setframerate(rate_hz)
        writer.writeframes(pcm16)
    return out.getvalue()


@pytest.mark.parametrize("channels", [1, 2])
def test_the_file_written_is_the_one_the_standard_library_writes(channels: int) -> None:
    pcm = _pcm16(480, channels)
    assert wav_bytes(pcm, 24000, channels) == _stdlib_wav(pcm, 24000, channels)
    assert len(wav_header(24000, 480, channels)) == HEADER_BYTES


@pytest.mark.parametrize("channels", [1, 2])
def test_a_written_file_reads_back_as_it_was(channels: int) -> None:
    pcm = _pcm16(160, channels)
    assert read_wav(wav_bytes(pcm, 16000, channels)) == (channels, 2, 16000, pcm)


def test_a_streamed_file_reads_to_its_end_whatever_its_header_says() -> None:
    pcm = _pcm16(100, 1)
    whole = bytearray(wav_bytes(pcm, 22050))
    whole[4:8] = whole[40:44] = struct.pack("<I", 0xFFFFFFFF)  # sizes a pipe cannot know
    assert read_streamed_wav(bytes(whole) + b"\x01") == (22050, pcm)  # torn sample dropped


@pytest.mark.parametrize("data", [b"", b"not a wav file at all", wav_header(16000, 0)[:30]])
def test_anything_else_is_one_clear_error(data: bytes) -> None:
    with pytest.raises(WavError):
        read_wav(data)
    with pytest.raises(WavError):
        read_streamed_wav(data)
