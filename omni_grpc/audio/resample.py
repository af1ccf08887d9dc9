"""Sample-rate conversion with libsoxr, one-shot or streamed chunk by chunk.

Audio arrives in small chunks (often 20 to 200 ms). Resampling each chunk on its own would
restart the filter every time and leave a click at every boundary, so a stream of chunks goes
through one :class:`StreamResampler`, which keeps the filter state between calls. Its output
is the one-shot :func:`resample` of the whole signal (to within 16-bit dither), delayed: the
filter holds back a few milliseconds of output (about 21 ms from 16 to 24 kHz, 66 ms from 8
to 16 kHz) until more input or :meth:`StreamResampler.flush` arrives. Flush at the end of a
turn or a response, never per chunk.
"""

from __future__ import annotations

import numpy as np
import soxr

from omni_grpc.audio.formats import AudioFormatError, Pcm16, Samples, check_rate

# soxr's "high quality" preset: 20-bit precision, passband to 91 % of Nyquist, linear phase.
QUALITY = "HQ"


def _mono_float32(samples: Samples) -> Samples:
    data = np.ascontiguousarray(samples, dtype=np.float32)
    if data.ndim != 1:
        raise AudioFormatError("bad_audio", f"expected mono samples, got shape {data.shape}")
    return data


def resample(samples: Samples, in_rate_hz: int, out_rate_hz: int) -> Samples:
    """Resamples a whole mono signal at once."""
    check_rate(in_rate_hz)
    check_rate(out_rate_hz)
    data = _mono_float32(samples)
    if in_rate_hz == out_rate_hz or data.size == 0:
        return data.copy()
    out: Samples = soxr.resample(data, in_rate_hz, out_rate_hz, quality=QUALITY)
    return out


class StreamResampler:
    """Resamples one continuous mono stream of 16-bit samples delivered in chunks.

    Keep one per stream (a session's input, a response's output). ``process`` returns what the
    filter can already produce; ``flush`` returns the held-back tail at the end of the stream
    and makes the resampler ready for a new stream; ``reset`` drops the tail instead.

    libsoxr works on 16-bit samples in and out here, so a chunk needs no float copy on either
    side. Bringing its float result down to 16 bits, libsoxr adds triangular (TPDF) dither:
    each output sample is within 1 step of the rounded float result (:func:`resample` of the
    concatenated input), and two runs over the same chunks may differ by that step (the noise
    is not reproducible). Digital silence comes out as +-1 step of noise, 90 dB below full
    scale: far under any speech detector's threshold.
    """

    __slots__ = ("in_rate_hz", "out_rate_hz", "_stream")

    def __init__(self, in_rate_hz: int, out_rate_hz: int) -> None:
        check_rate(in_rate_hz)
        check_rate(out_rate_hz)
        self.in_rate_hz = in_rate_hz
        self.out_rate_hz = out_rate_hz
        self._stream = (
            None
            if in_rate_hz == out_rate_hz
            else soxr.ResampleStream(in_rate_hz, out_rate_hz, 1, dtype="int16", quality=QUALITY)
        )

    def __repr__(self) -> str:
        return f"StreamResampler({self.in_rate_hz} Hz -> {self.out_rate_hz} Hz)"

    def process(self, pcm: Pcm16) -> Pcm16:
        """Feeds one chunk; returns the output that is ready (possibly empty)."""
        if pcm.ndim != 1:
            raise AudioFormatError("bad_audio", f"expected mono samples, got shape {pcm.shape}")
        if self._stream is None:
            return pcm
        out: Pcm16 = self._stream.resample_chunk(pcm, last=False)
        return out

    def flush(self) -> Pcm16:
        """Ends the stream: returns the held-back tail and resets for the next stream."""
        if self._stream is None:
            return _NOTHING
        tail: Pcm16 = self._stream.resample_chunk(_NOTHING, last=True)
        self._stream.clear()
        return tail

    def reset(self) -> None:
        """Drops whatever the filter holds (e.g. after a cancel) without returning it."""
        if self._stream is not None:
            self._stream.clear()


_NOTHING: Pcm16 = np.zeros(0, dtype=np.int16)
_NOTHING.flags.writeable = False
