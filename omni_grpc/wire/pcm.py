"""The PCM facts every layer agrees on: canonical formats, sample widths, supported rates.

(How samples lie in bytes, and converting between formats, is :mod:`omni_grpc.audio`'s; these
are only the numbers, which the core needs too and which it may import.)

Engines take :data:`CANONICAL_INPUT` and produce :data:`CANONICAL_OUTPUT` unless they declare
otherwise; clients may use any of :data:`SUPPORTED_RATES_HZ` in any encoding of
:data:`SAMPLE_WIDTH`. These are the only places the numbers are written.
"""

from __future__ import annotations

from omni_grpc.wire.pb import pb

# Input handed to engines: mono signed 16-bit little-endian PCM at 16 kHz (what ASR models and
# VADs are trained on).
CANONICAL_INPUT_RATE_HZ = 16000
# Output engines produce: mono pcm16 at 24 kHz (OpenAI Realtime's rate, which stock clients play).
CANONICAL_OUTPUT_RATE_HZ = 24000
CANONICAL_INPUT = pb.AudioFormat(
    encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=CANONICAL_INPUT_RATE_HZ
)
CANONICAL_OUTPUT = pb.AudioFormat(
    encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=CANONICAL_OUTPUT_RATE_HZ
)

# The encodings we decode and encode, and the bytes per sample of each (an append must hold
# whole samples).
SUPPORTED_ENCODINGS: tuple[pb.AudioEncoding.ValueType, ...] = (
    pb.AUDIO_ENCODING_PCM16,
    pb.AUDIO_ENCODING_PCM_F32,
    pb.AUDIO_ENCODING_G711_ULAW,
    pb.AUDIO_ENCODING_G711_ALAW,
)
SAMPLE_WIDTH: dict[int, int] = dict(zip(SUPPORTED_ENCODINGS, (2, 4, 1, 1), strict=True))
PCM16_WIDTH = SAMPLE_WIDTH[pb.AUDIO_ENCODING_PCM16]
# Sample rates a client may send or ask for, in any encoding.
SUPPORTED_RATES_HZ: tuple[int, ...] = (8000, 16000, 22050, 24000, 44100, 48000)
# G.711 is defined at 8 kHz: the rate a G.711 format gets when it names none.
G711_RATE_HZ = 8000


def pcm16_ms(n_bytes: int, rate_hz: int) -> float:
    """The length in milliseconds of ``n_bytes`` of mono pcm16 at ``rate_hz``."""
    return n_bytes / PCM16_WIDTH * 1000.0 / rate_hz


def pcm16_bytes(duration_ms: float, rate_hz: int) -> int:
    """The size in bytes of ``duration_ms`` of mono pcm16 at ``rate_hz`` (whole samples)."""
    return int(duration_ms * rate_hz / 1000) * PCM16_WIDTH


def canonical_input_bytes(size: int, encoding: int, rate_hz: int) -> int:
    """How many bytes ``size`` bytes of client audio take once made canonical input."""
    samples = size // SAMPLE_WIDTH[encoding]
    return -(-samples * CANONICAL_INPUT_RATE_HZ // rate_hz) * PCM16_WIDTH
