"""Conversions at the edge: client formats to the engines' canonical forms and back.

Engines take pcm16 at 16 kHz and produce pcm16 at 24 kHz (the canonical forms of
:mod:`omni_grpc.wire.pcm`). The one-shot functions convert a complete buffer, through float
samples. A stream of appends goes through one :class:`InputConverter` per session, and a
response's output through one :class:`OutputConverter`: they carry resampler state from chunk
to chunk so that chunk seams stay clean, and work on 16-bit samples throughout (see
:class:`~omni_grpc.audio.resample.StreamResampler` for the dither that brings).
"""

from __future__ import annotations

import numpy as np

from omni_grpc.audio.formats import (
    PCM16,
    AudioFormatError,
    Pcm16,
    decode,
    decode_pcm16,
    encode,
    encode_pcm16,
)
from omni_grpc.audio.resample import StreamResampler, resample
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, CANONICAL_OUTPUT_RATE_HZ, PCM16_WIDTH


def to_canonical_input(audio: bytes, encoding: int, rate_hz: int) -> bytes:
    """Converts a complete buffer of client audio to pcm16 at 16 kHz."""
    samples = resample(decode(audio, encoding, rate_hz), rate_hz, CANONICAL_INPUT_RATE_HZ)
    return encode(samples, PCM16, CANONICAL_INPUT_RATE_HZ)


def from_canonical_output(pcm16_24k: bytes, encoding: int, rate_hz: int) -> bytes:
    """Converts a complete buffer of engine output (pcm16, 24 kHz) to the client's format."""
    samples = decode(pcm16_24k, PCM16, CANONICAL_OUTPUT_RATE_HZ)
    return encode(resample(samples, CANONICAL_OUTPUT_RATE_HZ, rate_hz), encoding, rate_hz)


def chunk_pcm16(audio: bytes, max_bytes: int) -> list[bytes]:
    """Splits pcm16 audio into chunks of at most ``max_bytes``, never splitting a sample."""
    if len(audio) % PCM16_WIDTH:
        raise AudioFormatError("bad_audio", "pcm16 audio must have an even number of bytes")
    size = max_bytes - max_bytes % PCM16_WIDTH
    if size <= 0:
        raise ValueError(f"max_bytes must be at least 2, got {max_bytes}")
    return [audio[start : start + size] for start in range(0, len(audio), size)]


class InputConverter:
    """Client input audio to canonical input, for one session's stream of appends.

    Each append may name its own format; when the rate changes, the old resampler's tail is
    flushed ahead of the new audio so no sample is lost. Call :meth:`flush` when the turn is
    committed (the filter holds back a few milliseconds) and :meth:`reset` when the input is
    dropped.
    """

    __slots__ = ("_resampler",)

    def __init__(self) -> None:
        self._resampler: StreamResampler | None = None

    def convert(self, audio: bytes, encoding: int, rate_hz: int) -> bytes:
        """Converts one append; returns the canonical audio that is ready."""
        pcm = decode_pcm16(audio, encoding, rate_hz)
        if self._resampler is None or self._resampler.in_rate_hz != rate_hz:
            held = b""
            if self._resampler is not None:
                held = encode_pcm16(self._resampler.flush(), PCM16, CANONICAL_INPUT_RATE_HZ)
            self._resampler = StreamResampler(rate_hz, CANONICAL_INPUT_RATE_HZ)
            return held + self._canonical(self._resampler.process(pcm))
        return self._canonical(self._resampler.process(pcm))

    @staticmethod
    def _canonical(pcm: Pcm16) -> bytes:
        return encode_pcm16(pcm, PCM16, CANONICAL_INPUT_RATE_HZ)

    def flush(self) -> bytes:
        """Returns the held-back tail of the turn's audio; the next append starts afresh."""
        if self._resampler is None:
            return b""
        return self._canonical(self._resampler.flush())

    def reset(self) -> None:
        """Forgets the held-back audio (the input buffer was cleared)."""
        if self._resampler is not None:
            self._resampler.reset()


class OutputConverter:
    """Engine output to the session's output format, for one response's stream of chunks.

    The engine's output is ``source_encoding`` at ``source_rate_hz``: canonical output unless
    the engine names another form. Call :meth:`flush` after the last delta of a response;
    drop the converter (or :meth:`reset` it) when a response is cancelled, so that no audio
    of one response leaks into the next.
    """

    __slots__ = ("encoding", "rate_hz", "source_encoding", "source_rate_hz", "_resampler")

    def __init__(
        self,
        encoding: int,
        rate_hz: int,
        source_rate_hz: int = CANONICAL_OUTPUT_RATE_HZ,
        source_encoding: int = PCM16,
    ) -> None:
        encode_pcm16(_NO_SAMPLES, encoding, rate_hz)  # refuses a bad format now
        decode_pcm16(b"", source_encoding, source_rate_hz)
        self.encoding = encoding
        self.rate_hz = rate_hz
        self.source_encoding = source_encoding
        self.source_rate_hz = source_rate_hz
        self._resampler = StreamResampler(source_rate_hz, rate_hz)

    def convert(self, engine_audio: bytes) -> bytes:
        """Converts one chunk of engine audio; returns the output that is ready."""
        pcm = decode_pcm16(engine_audio, self.source_encoding, self.source_rate_hz)
        return encode_pcm16(self._resampler.process(pcm), self.encoding, self.rate_hz)

    def flush(self) -> bytes:
        """Returns the held-back tail of the response's audio."""
        return encode_pcm16(self._resampler.flush(), self.encoding, self.rate_hz)

    def reset(self) -> None:
        """Forgets the held-back audio of a cancelled response."""
        self._resampler.reset()


_NO_SAMPLES: Pcm16 = np.zeros(0, dtype=np.int16)
