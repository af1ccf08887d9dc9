"""Audio formats and rates, in one place: decoding, encoding, G.711 and resampling.

Nothing else in the project knows how samples are laid out in bytes. Clients send and receive
any :data:`SUPPORTED_RATES_HZ` rate in pcm16, pcm_f32 or G.711 µ-law/A-law; engines see pcm16
at 16 kHz and produce pcm16 at 24 kHz; the transport converts between the two with this
package, using :class:`InputConverter` and :class:`OutputConverter` for streams. Resampling is
libsoxr's; nothing here loops over samples in Python.
"""

from __future__ import annotations

from omni_grpc.audio.convert import (
    InputConverter,
    OutputConverter,
    chunk_pcm16,
    from_canonical_output,
    to_canonical_input,
)
from omni_grpc.audio.formats import (
    AudioFormatError,
    check_format,
    decode,
    decode_pcm16,
    duration_ms,
    encode,
    encode_pcm16,
)
from omni_grpc.audio.resample import StreamResampler, resample
from omni_grpc.wire.audio import (
    CANONICAL_INPUT_RATE_HZ,
    CANONICAL_OUTPUT_RATE_HZ,
    SAMPLE_WIDTH,
    SUPPORTED_RATES_HZ,
)

__all__ = [
    "CANONICAL_INPUT_RATE_HZ",
    "CANONICAL_OUTPUT_RATE_HZ",
    "SAMPLE_WIDTH",
    "SUPPORTED_RATES_HZ",
    "AudioFormatError",
    "InputConverter",
    "OutputConverter",
    "StreamResampler",
    "check_format",
    "chunk_pcm16",
    "decode",
    "decode_pcm16",
    "duration_ms",
    "encode",
    "encode_pcm16",
    "from_canonical_output",
    "resample",
    "to_canonical_input",
]
