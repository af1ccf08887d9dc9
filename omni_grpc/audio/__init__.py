"""Audio formats and rates, in one place: decoding, encoding, G.711 and resampling.

Clients send and receive any :data:`SUPPORTED_RATES_HZ` rate in pcm16, pcm_f32 or G.711
µ-law/A-law; engines see pcm16 at 16 kHz and produce pcm16 at 24 kHz; the transport converts
between the two with this package, using :class:`InputConverter` and :class:`OutputConverter`
for streams. Resampling is libsoxr's; nothing here loops over samples in Python.

Nothing else in the service knows how samples are laid out in bytes: the engines and the talk
command turn pcm16 into float samples and back with :func:`samples_from_pcm16` and
:func:`samples_to_pcm16`, and read WAV's integer layouts with :func:`samples_from_pcm_frames`;
the recordings lay their two tracks out with :func:`pcm16_ints` and
:func:`silent_pcm16_frames`. WAV files are written and read in :mod:`omni_grpc.audio.wav` only.
(The test speech scripts write their clips at a scale of their own: see
``scripts/make_test_speech.py``.)
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
    pcm16_ints,
    samples_from_pcm16,
    samples_from_pcm_frames,
    samples_to_pcm16,
    silent_pcm16_frames,
)
from omni_grpc.audio.resample import StreamResampler, resample
from omni_grpc.wire.pcm import (
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
    "pcm16_ints",
    "resample",
    "samples_from_pcm16",
    "samples_from_pcm_frames",
    "samples_to_pcm16",
    "silent_pcm16_frames",
    "to_canonical_input",
]
