"""G.711 against the ITU-T reference algorithm, known code values and its error bounds."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest

from omni_grpc.audio import g711

ALL_PCM = np.arange(-32768, 32768, dtype=np.int16)
ALL_CODES = bytes(range(256))
Encoder = Callable[[npt.NDArray[np.int16]], bytes]
Decoder = Callable[[bytes], npt.NDArray[np.int16]]


# Scalar transcriptions of ITU-T G.191 (STL) g711.c, one sample at a time: the reference the
# vectorized tables must reproduce for every input.
def g191_ulaw_compress(x: int) -> int:
    absno = ((~x) >> 2) + 33 if x < 0 else (x >> 2) + 33
    absno = min(absno, 0x1FFF)
    i, segno = absno >> 6, 1
    while i:
        segno += 1
        i >>= 1
    out = ((8 - segno) << 4) | (0x0F - ((absno >> segno) & 0x0F))
    return out | 0x80 if x >= 0 else out


def g191_ulaw_expand(y: int) -> int:
    sign = -1 if y < 0x80 else 1
    mantissa = ~y
    exponent = (mantissa >> 4) & 0x07
    step = 4 << (exponent + 1)
    return sign * ((0x80 << exponent) + step * (mantissa & 0x0F) + step // 2 - 4 * 33)


def g191_alaw_compress(x: int) -> int:
    ix = (~x) >> 4 if x < 0 else x >> 4
    if ix > 15:
        iexp = 1
        while ix > 16 + 15:
            ix >>= 1
            iexp += 1
        ix = ix - 16 + (iexp << 4)
    if x >= 0:
        ix |= 0x80
    return ix ^ 0x55


def g191_alaw_expand(y: int) -> int:
    ix = y ^ 0x55
    iexp = (ix & 0x7F) >> 4
    mant = ix & 0x0F
    if iexp > 0:
        mant += 16
    mant = (mant << 4) + 8
    if iexp > 1:
        mant <<= iexp - 1
    return mant if ix > 127 else -mant


def codes(data: bytes) -> list[int]:
    return list(data)


def test_ulaw_matches_the_reference_for_every_sample_and_code() -> None:
    assert codes(g711.ulaw_encode(ALL_PCM)) == [g191_ulaw_compress(int(x)) for x in ALL_PCM]
    assert g711.ulaw_decode(ALL_CODES).tolist() == [g191_ulaw_expand(c) for c in range(256)]


def test_alaw_matches_the_reference_for_every_sample_and_code() -> None:
    assert codes(g711.alaw_encode(ALL_PCM)) == [g191_alaw_compress(int(x)) for x in ALL_PCM]
    assert g711.alaw_decode(ALL_CODES).tolist() == [g191_alaw_expand(c) for c in range(256)]


@pytest.mark.parametrize(
    ("encode", "pcm", "code"),
    [
        (g711.ulaw_encode, 0, 0xFF),
        (g711.ulaw_encode, -1, 0x7F),  # "negative zero"
        (g711.ulaw_encode, 32767, 0x80),
        (g711.ulaw_encode, -32768, 0x00),
        (g711.alaw_encode, 0, 0xD5),
        (g711.alaw_encode, -1, 0x55),
        (g711.alaw_encode, 32767, 0xAA),
        (g711.alaw_encode, -32768, 0x2A),
    ],
)
def test_known_codes(encode: Encoder, pcm: int, code: int) -> None:
    assert encode(np.array([pcm], dtype=np.int16)) == bytes([code])


def test_known_expansions() -> None:
    assert g711.ulaw_decode(bytes([0xFF, 0x7F, 0x80, 0x00])).tolist() == [0, 0, 32124, -32124]
    assert g711.alaw_decode(bytes([0xD5, 0x55, 0xAA, 0x2A])).tolist() == [8, -8, 32256, -32256]


@pytest.mark.parametrize(
    ("encode", "decode", "max_error"),
    [(g711.ulaw_encode, g711.ulaw_decode, 644), (g711.alaw_encode, g711.alaw_decode, 512)],
    ids=["ulaw", "alaw"],
)
def test_round_trip_error_stays_within_half_a_step(
    encode: Encoder, decode: Decoder, max_error: int
) -> None:
    back = decode(encode(ALL_PCM)).astype(np.int32)
    error = np.abs(back - ALL_PCM.astype(np.int32))
    magnitude = np.abs(ALL_PCM.astype(np.int32))
    # Steps double with each segment, so the error is small absolutely near zero and
    # relatively (under 1/20) above; only clipping at full scale exceeds half the top step.
    assert error[magnitude < 256].max() <= 8
    mid = (magnitude >= 256) & (magnitude <= 32000)
    assert (error[mid] / magnitude[mid]).max() < 1 / 20
    assert error.max() == max_error
    assert np.all(np.diff(back) >= 0), "expansion of compressed samples must be monotonic"
    # Every code but µ-law's negative zero survives expansion and compression unchanged.
    again = encode(decode(ALL_CODES))
    changed = [c for c in range(256) if again[c] != c]
    assert changed == ([0x7F] if encode is g711.ulaw_encode else [])


@pytest.mark.parametrize(
    ("encode", "decode", "min_snr_db"),
    [(g711.ulaw_encode, g711.ulaw_decode, 35.0), (g711.alaw_encode, g711.alaw_decode, 37.0)],
    ids=["ulaw", "alaw"],
)
def test_a_sine_keeps_telephone_quality(
    encode: Encoder, decode: Decoder, min_snr_db: float
) -> None:
    t = np.arange(8000) / 8000
    tone = np.rint(0.5 * 32767 * np.sin(2 * np.pi * 1004 * t)).astype(np.int16)
    back = decode(encode(tone)).astype(np.float64)
    noise = back - tone
    snr_db = 10 * np.log10(np.sum(tone.astype(np.float64) ** 2) / np.sum(noise**2))
    assert min_snr_db < snr_db < 45.0
