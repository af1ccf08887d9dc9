"""G.711 µ-law and A-law, as the ITU-T reference software (G.191 STL) computes them.

Both laws are built once, at import, into lookup tables by vectorized arithmetic over every
input: 65,536 entries for compression (indexed by the 16-bit sample's bit pattern) and 256 for
expansion. Coding a buffer is then one numpy ``take``, with no per-sample Python.

G.711 itself is defined on 14-bit (µ-law) and 13-bit (A-law) linear samples. From 16-bit PCM,
G.191 drops the low bits of the magnitude, taking the one's complement (``~x``, that is
``-x - 1``) of a negative sample first; that choice, not ``-x``, is what makes -1 code to the
same "negative zero" as the smallest negative steps, and it is what we follow. Known values:
µ-law codes 0 as 0xFF and full scale as 0x80 (positive) and 0x00 (negative); A-law codes 0 as
0xD5 and full scale as 0xAA and 0x2A. Expansion returns the middle of each step on the 16-bit
scale (µ-law full scale expands to ±32124, A-law to ±32256).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_ULAW_BIAS = 33  # added to the 14-bit magnitude so that every segment starts on a power of 2
_ULAW_MAX = 0x1FFF  # the largest biased 14-bit magnitude


def _bit_length(values: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    # frexp(v) = (m, e) with v = m * 2**e and 0.5 <= m < 1, so e is v's bit length (0 for 0).
    return np.frexp(values.astype(np.float64))[1].astype(np.int32)


def _ulaw_compress(x: npt.NDArray[np.int32]) -> npt.NDArray[np.uint8]:
    magnitude = np.where(x < 0, ~x, x) >> 2
    biased = np.minimum(magnitude + _ULAW_BIAS, _ULAW_MAX)
    segment = 1 + _bit_length(biased >> 6)  # 1..8
    mantissa = 0x0F - ((biased >> segment) & 0x0F)
    code = ((8 - segment) << 4) | mantissa
    return np.where(x >= 0, code | 0x80, code).astype(np.uint8)


def _ulaw_expand(code: npt.NDArray[np.int32]) -> npt.NDArray[np.int16]:
    inverted = ~code
    exponent = (inverted >> 4) & 0x07
    mantissa = inverted & 0x0F
    step = 4 << (exponent + 1)
    magnitude = (0x80 << exponent) + step * mantissa + step // 2 - 4 * _ULAW_BIAS
    return np.where(code < 0x80, -magnitude, magnitude).astype(np.int16)


def _alaw_compress(x: npt.NDArray[np.int32]) -> npt.NDArray[np.uint8]:
    magnitude = np.where(x < 0, ~x, x) >> 4  # 12 bits
    # Segment 0 and 1 share a step of 1; above that each segment doubles the step.
    exponent = np.maximum(_bit_length(magnitude) - 4, 0)  # 0..7
    mantissa = np.where(exponent > 0, (magnitude >> np.maximum(exponent - 1, 0)) - 16, magnitude)
    code = (exponent << 4) | mantissa
    return (np.where(x >= 0, code | 0x80, code) ^ 0x55).astype(np.uint8)


def _alaw_expand(code: npt.NDArray[np.int32]) -> npt.NDArray[np.int16]:
    toggled = code ^ 0x55
    exponent = (toggled & 0x7F) >> 4
    mantissa = (toggled & 0x0F) + np.where(exponent > 0, 16, 0)
    magnitude = ((mantissa << 4) + 8) << np.maximum(exponent - 1, 0)
    return np.where(toggled > 0x7F, magnitude, -magnitude).astype(np.int16)


# Compression tables are indexed by the sample's unsigned 16-bit pattern (int16.view(uint16)),
# so entry i holds the code of the sample whose two's complement bits are i.
_PATTERNS = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.int16).astype(np.int32)
_CODES = np.arange(256, dtype=np.int32)
ULAW_COMPRESS = _ulaw_compress(_PATTERNS)
ULAW_EXPAND = _ulaw_expand(_CODES)
ALAW_COMPRESS = _alaw_compress(_PATTERNS)
ALAW_EXPAND = _alaw_expand(_CODES)
for _table in (ULAW_COMPRESS, ULAW_EXPAND, ALAW_COMPRESS, ALAW_EXPAND):
    _table.flags.writeable = False


def ulaw_encode(pcm: npt.NDArray[np.int16]) -> bytes:
    """Compresses 16-bit samples to µ-law bytes."""
    return ULAW_COMPRESS.take(pcm.astype(np.int16, copy=False).view(np.uint16)).tobytes()


def ulaw_decode(data: bytes) -> npt.NDArray[np.int16]:
    """Expands µ-law bytes to 16-bit samples."""
    return ULAW_EXPAND.take(np.frombuffer(data, dtype=np.uint8))


def alaw_encode(pcm: npt.NDArray[np.int16]) -> bytes:
    """Compresses 16-bit samples to A-law bytes."""
    return ALAW_COMPRESS.take(pcm.astype(np.int16, copy=False).view(np.uint16)).tobytes()


def alaw_decode(data: bytes) -> npt.NDArray[np.int16]:
    """Expands A-law bytes to 16-bit samples."""
    return ALAW_EXPAND.take(np.frombuffer(data, dtype=np.uint8))
