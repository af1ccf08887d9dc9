"""Sample layouts: bytes of any accepted encoding to float32 samples in [-1, 1] and back.

One-shot conversions go through float32 mono samples: :func:`decode` turns wire bytes into
them and :func:`encode` turns them back. PCM16 maps ``x / 32768`` so that a PCM16 round trip is
lossless; on the way back samples are clipped to [-1, 1] and rounded, so that full scale +1.0
becomes 32767 rather than wrapping to -32768. Streams go through 16-bit samples instead
(:func:`decode_pcm16`, :func:`encode_pcm16`): every wire format but pcm_f32 is 16-bit or less,
so a chunk of them is resampled without a float copy on either side. Inside the service,
pcm16 bytes become float samples and back with :func:`samples_from_pcm16` and
:func:`samples_to_pcm16` (the same scaling and rounding).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from omni_grpc.audio import g711
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import SAMPLE_WIDTH, SUPPORTED_RATES_HZ

PCM16 = pb.AUDIO_ENCODING_PCM16
PCM_F32 = pb.AUDIO_ENCODING_PCM_F32
G711_ULAW = pb.AUDIO_ENCODING_G711_ULAW
G711_ALAW = pb.AUDIO_ENCODING_G711_ALAW


Samples = npt.NDArray[np.float32]
Pcm16 = npt.NDArray[np.int16]


class AudioFormatError(ValueError):
    """Audio that cannot be decoded or encoded as asked.

    ``code`` is the wire error code for it: ``unsupported_audio_format`` for an encoding or
    rate we do not handle, ``bad_audio`` for bytes that are not whole samples.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_format(encoding: int, rate_hz: int) -> None:
    """Raises AudioFormatError unless ``encoding`` at ``rate_hz`` is supported."""
    if encoding not in SAMPLE_WIDTH:
        raise AudioFormatError("unsupported_audio_format", f"unsupported encoding {encoding}")
    check_rate(rate_hz)


def check_rate(rate_hz: int) -> None:
    """Raises AudioFormatError unless ``rate_hz`` is a supported sample rate."""
    if rate_hz not in SUPPORTED_RATES_HZ:
        raise AudioFormatError(
            "unsupported_audio_format",
            f"unsupported sample rate {rate_hz} Hz; supported: "
            f"{', '.join(map(str, SUPPORTED_RATES_HZ))}",
        )


def _check_samples(audio: bytes, encoding: int, rate_hz: int) -> None:
    """Refuses a format this server does not take, or bytes that split a sample."""
    check_format(encoding, rate_hz)
    if len(audio) % SAMPLE_WIDTH[encoding]:
        raise AudioFormatError(
            "bad_audio",
            f"{len(audio)} bytes is not a whole number of {SAMPLE_WIDTH[encoding]}-byte samples",
        )


def duration_ms(n_bytes: int, encoding: int, rate_hz: int) -> float:
    """The length in milliseconds of ``n_bytes`` of audio in the given format."""
    check_format(encoding, rate_hz)
    return n_bytes / SAMPLE_WIDTH[encoding] * 1000.0 / rate_hz


def pcm16_to_float(pcm: npt.NDArray[np.int16]) -> Samples:
    """16-bit samples to float32 in [-1, 1) (exact: a division by a power of two)."""
    return pcm.astype(np.float32) / np.float32(32768.0)


def float_to_pcm16(samples: npt.NDArray[np.floating[Any]]) -> Pcm16:
    """Float samples to 16-bit, clipped and rounded to the nearest step (float64 samples are
    scaled and rounded in float64)."""
    # One clip after scaling (not one before and one after): this runs on every chunk.
    scaled = np.clip(samples * np.float32(32768.0), np.float32(-32768.0), np.float32(32767.0))
    return np.rint(scaled).astype(np.int16)


def samples_from_pcm16(data: bytes) -> Samples:
    """Mono pcm16 bytes to float32 samples in [-1, 1), as :func:`pcm16_to_float`."""
    return pcm16_to_float(np.frombuffer(data, dtype="<i2"))


def samples_to_pcm16(samples: npt.NDArray[np.floating[Any]]) -> bytes:
    """Mono float samples to pcm16 bytes, as :func:`float_to_pcm16`."""
    return float_to_pcm16(samples).astype("<i2", copy=False).tobytes()


def pcm16_ints(data: bytes) -> npt.NDArray[np.int16]:
    """The samples of pcm16 bytes as int16, in the order they lie (a view: no copy)."""
    return np.frombuffer(data, dtype="<i2")


def silent_pcm16_frames(count: int, channels: int) -> npt.NDArray[np.int16]:
    """``count`` frames of silence of ``channels`` interleaved pcm16 samples, to be filled
    channel by channel (``frames[:, channel]``); ``tobytes()`` gives them as a WAV lays them."""
    return np.zeros((count, channels), dtype="<i2")


def samples_from_pcm_frames(frames: bytes, width: int, channels: int) -> npt.NDArray[np.float64]:
    """Integer PCM frames as WAV lays them out (``width`` bytes a sample: 8-bit unsigned, 16,
    24 or 32-bit signed little-endian; ``channels`` interleaved) to float64 samples in
    [-1, 1), the channels averaged. Each width is scaled by a power of two, so the samples are
    exact; float64 keeps 24 and 32-bit samples whole, and an average of channels close.
    """
    if width == 1:
        samples = (np.frombuffer(frames, dtype=np.uint8).astype(np.float64) - 128) / 128
    elif width == 2:
        samples = samples_from_pcm16(frames).astype(np.float64)
    elif width == 3:
        raw = np.frombuffer(frames, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        value = raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)
        samples = np.where(value >= 1 << 23, value - (1 << 24), value) / float(1 << 23)
    elif width == 4:
        samples = np.frombuffer(frames, dtype="<i4").astype(np.float64) / float(1 << 31)
    else:
        raise AudioFormatError(
            "unsupported_audio_format", f"unsupported sample width: {width} bytes"
        )
    mono: npt.NDArray[np.float64] = samples.reshape(-1, channels).mean(axis=1)
    return mono


def decode(audio: bytes, encoding: int, rate_hz: int) -> Samples:
    """Decodes mono ``audio`` to float32 samples in [-1, 1].

    ``rate_hz`` is not needed to read samples but is checked, so that a bad format is refused
    where the bytes enter. Float input is clipped to [-1, 1] and NaN becomes silence.
    """
    _check_samples(audio, encoding, rate_hz)
    if encoding == PCM16:
        return samples_from_pcm16(audio)
    if encoding == PCM_F32:
        raw = np.frombuffer(audio, dtype="<f4").astype(np.float32)
        return np.clip(np.nan_to_num(raw, nan=0.0, posinf=1.0, neginf=-1.0), -1.0, 1.0)
    if encoding == G711_ULAW:
        return pcm16_to_float(g711.ulaw_decode(audio))
    return pcm16_to_float(g711.alaw_decode(audio))


def decode_pcm16(audio: bytes, encoding: int, rate_hz: int) -> Pcm16:
    """Decodes mono ``audio`` to 16-bit samples (pcm16 and G.711 exactly; pcm_f32 rounded).

    For pcm16 the result is a read-only view of ``audio``, not a copy.
    """
    _check_samples(audio, encoding, rate_hz)
    if encoding == PCM16:
        return np.frombuffer(audio, dtype="<i2").astype(np.int16, copy=False)
    if encoding == G711_ULAW:
        return g711.ulaw_decode(audio)
    if encoding == G711_ALAW:
        return g711.alaw_decode(audio)
    return float_to_pcm16(decode(audio, encoding, rate_hz))


def encode_pcm16(pcm: Pcm16, encoding: int, rate_hz: int) -> bytes:
    """Encodes mono 16-bit samples as ``encoding`` bytes (pcm_f32 as ``x / 32768``)."""
    check_format(encoding, rate_hz)
    if encoding == PCM16:
        return pcm.astype("<i2", copy=False).tobytes()
    if encoding == G711_ULAW:
        return g711.ulaw_encode(pcm)
    if encoding == G711_ALAW:
        return g711.alaw_encode(pcm)
    return pcm16_to_float(pcm).astype("<f4", copy=False).tobytes()


def encode(samples: npt.ArrayLike, encoding: int, rate_hz: int) -> bytes:
    """Encodes mono float samples (clipped to [-1, 1]) as ``encoding`` bytes."""
    check_format(encoding, rate_hz)
    data = np.asarray(samples, dtype=np.float32)
    if data.ndim != 1:
        raise AudioFormatError("bad_audio", f"expected mono samples, got shape {data.shape}")
    if encoding == PCM_F32:
        return np.clip(data, -1.0, 1.0).astype("<f4").tobytes()
    pcm = float_to_pcm16(data)
    if encoding == PCM16:
        return pcm.astype("<i2").tobytes()
    if encoding == G711_ULAW:
        return g711.ulaw_encode(pcm)
    return g711.alaw_encode(pcm)
