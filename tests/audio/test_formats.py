"""Decoding and encoding each sample layout, and refusing what is not audio."""

from __future__ import annotations

import numpy as np
import pytest

from omni_grpc import audio
from omni_grpc.wire import pb

PCM16 = pb.AUDIO_ENCODING_PCM16
F32 = pb.AUDIO_ENCODING_PCM_F32
ULAW = pb.AUDIO_ENCODING_G711_ULAW
ALAW = pb.AUDIO_ENCODING_G711_ALAW


def test_pcm16_round_trip_is_lossless_for_every_sample() -> None:
    every = np.arange(-32768, 32768, dtype="<i2").tobytes()
    samples = audio.decode(every, PCM16, 16000)
    assert samples.dtype == np.float32
    assert samples.min() == -1.0 and samples.max() == pytest.approx(32767 / 32768)
    assert audio.encode(samples, PCM16, 16000) == every


def test_encoding_clips_and_rounds_instead_of_wrapping() -> None:
    pcm = audio.encode(np.array([1.0, -1.0, 2.0, -3.0, 0.5, 1.4 / 32768]), PCM16, 24000)
    assert np.frombuffer(pcm, "<i2").tolist() == [32767, -32768, 32767, -32768, 16384, 1]
    f32 = audio.encode(np.array([1.5, -0.25]), F32, 24000)
    assert np.frombuffer(f32, "<f4").tolist() == [1.0, -0.25]


def test_float_input_is_clipped_and_nan_becomes_silence() -> None:
    raw = np.array([0.25, 7.0, -7.0, np.nan, np.inf, -np.inf], dtype="<f4").tobytes()
    assert audio.decode(raw, F32, 48000).tolist() == [0.25, 1.0, -1.0, 0.0, 1.0, -1.0]


@pytest.mark.parametrize("encoding", [ULAW, ALAW])
def test_g711_bytes_decode_to_floats_and_back(encoding: int) -> None:
    codes = bytes(range(256))
    samples = audio.decode(codes, encoding, 8000)
    assert samples.shape == (256,) and np.abs(samples).max() <= 1.0
    again = audio.encode(samples, encoding, 8000)
    assert sum(a != b for a, b in zip(again, codes, strict=True)) == (1 if encoding == ULAW else 0)


@pytest.mark.parametrize(
    ("encoding", "rate", "data", "code"),
    [
        (pb.AUDIO_ENCODING_UNSPECIFIED, 16000, b"\0\0", "unsupported_audio_format"),
        (99, 16000, b"\0\0", "unsupported_audio_format"),
        (PCM16, 11025, b"\0\0", "unsupported_audio_format"),
        (PCM16, 16000, b"\0\0\0", "bad_audio"),
        (F32, 16000, b"\0" * 6, "bad_audio"),
    ],
)
def test_bad_formats_and_torn_samples_are_refused(
    encoding: int, rate: int, data: bytes, code: str
) -> None:
    with pytest.raises(audio.AudioFormatError) as refused:
        audio.decode(data, encoding, rate)
    assert refused.value.code == code
    with pytest.raises(audio.AudioFormatError) as refused:
        audio.decode_pcm16(data, encoding, rate)
    assert refused.value.code == code


@pytest.mark.parametrize("encoding", [PCM16, F32, ULAW, ALAW])
def test_the_16_bit_path_gives_what_the_float_path_gives(encoding: int) -> None:
    # Every 16-bit value (or every G.711 code), through decode_pcm16 and encode_pcm16, comes
    # out as it does through the float samples of decode and encode.
    every = np.arange(-32768, 32768, dtype="<i2")
    data = (
        bytes(range(256)) if encoding in (ULAW, ALAW) else audio.encode_pcm16(every, encoding, 8000)
    )
    pcm = audio.decode_pcm16(data, encoding, 8000)
    assert pcm.dtype == np.int16
    assert audio.encode(audio.decode(data, encoding, 8000), PCM16, 8000) == pcm.tobytes()
    assert audio.encode_pcm16(pcm, encoding, 8000) == audio.encode(
        audio.decode(data, encoding, 8000), encoding, 8000
    )
    if encoding == PCM16:
        assert pcm.tobytes() == data  # a view of the bytes, read as they came


def test_encoding_refuses_more_than_one_channel() -> None:
    with pytest.raises(audio.AudioFormatError, match="mono") as refused:
        audio.encode(np.zeros((10, 2), dtype=np.float32), PCM16, 16000)
    assert refused.value.code == "bad_audio"


@pytest.mark.parametrize(
    ("n_bytes", "encoding", "rate", "ms"),
    [(16000, PCM16, 8000, 1000.0), (8000, ULAW, 8000, 1000.0), (1764, F32, 44100, 10.0)],
)
def test_duration(n_bytes: int, encoding: int, rate: int, ms: float) -> None:
    assert audio.duration_ms(n_bytes, encoding, rate) == pytest.approx(ms)
