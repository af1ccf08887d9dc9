"""Noise reduction of a session's input: RNNoise, before the detector and the recogniser hear it.

RNNoise (Xiph's recurrent denoiser, BSD-3-Clause; its weights are compiled into the library)
ships built in the ``pyrnnoise`` wheel (Apache-2.0 bindings), which the project installs
without its dependencies (an audio I/O and plotting stack we do not use): the shared library
is found with ``find_spec`` and called with ``ctypes``, and nothing of ``pyrnnoise`` is
imported.

RNNoise takes 10 ms frames of 48 kHz float samples on the 16-bit scale. A session's canonical
input is 16 kHz, so each frame is brought up by exactly 3 and back down by 3 with one short
linear-phase filter (a polyphase FIR: 3 output samples for every input sample, none held
back, unlike a block resampler); the samples of an append that do not fill a frame wait for
the next append. What comes out is the denoised input of whole frames, 10 ms behind the input
(RNNoise's overlap-add) plus 1.4 ms of the two filters.

The two settings, OpenAI's ``near_field`` and ``far_field``. Both mix the input back into
RNNoise's output, which bounds how far noise is lowered: RNNoise alone suppresses so hard that
it thins the voice, and Whisper heard white noise at 5 dB under the speech worse after it than
without it (a word error rate of 48 % against 40 %; mixed back at -20 dB, 37 %:
docs/measurements/2026-12-07-noise-reduction.md).

* ``near_field`` (a headset or a phone at the mouth: the voice is loud and the noise behind
  it): the input mixed back at -14 dB, so noise is lowered by at most 14 dB and the voice keeps
  the most of itself;
* ``far_field`` (a laptop or a room microphone: the voice is quiet and the noise near its
  level): the input mixed back at -20 dB (noise lowered by at most 20 dB), then a gain stage
  that brings speech up towards -26 dBFS (by at most +18 dB, never down), following the level
  of the frames RNNoise judges speech, so that a quiet talker reaches the levels the detector
  and the recogniser expect.
"""

from __future__ import annotations

import ctypes
import importlib.util
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from omni_grpc.wire import pb

PYRNNOISE_VERSION = "0.4.5"
LIBRARY = "librnnoise.so"
RNNOISE_RATE_HZ = 48_000
FRAME_MS = 10
UP = 3  # canonical input (16 kHz) to RNNoise's 48 kHz
FRAME = 160  # canonical input samples in one RNNoise frame
_SCALE = 32768.0
# The polyphase filter: a Kaiser-windowed sinc at 48 kHz, cut at 7.6 kHz (the 16 kHz input's
# band, 95 % of its Nyquist), 3 phases of 23 taps: 69 taps, 0.7 ms of delay each way.
_TAPS = 3 * 23
_CUTOFF_HZ = 7_600.0


class DenoiserMissing(RuntimeError):
    """The ``pyrnnoise`` wheel, and so RNNoise, is not installed."""


def library_path() -> Path:
    """RNNoise's library inside the installed wheel, located without importing ``pyrnnoise``
    (its ``__init__`` imports the audio I/O stack we do not install)."""
    spec = importlib.util.find_spec("pyrnnoise")
    for location in list(spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / LIBRARY
        if path.is_file():
            return path
    raise DenoiserMissing(
        "RNNoise is not installed: install it with "
        f"`pip install --no-deps pyrnnoise=={PYRNNOISE_VERSION}`"
    )


_library: ctypes.CDLL | None = None


def _rnnoise() -> ctypes.CDLL:
    global _library  # loaded once per process, on the first session that asks
    if _library is None:
        lib = ctypes.CDLL(str(library_path()))
        lib.rnnoise_create.argtypes = [ctypes.c_void_p]
        lib.rnnoise_create.restype = ctypes.c_void_p
        lib.rnnoise_destroy.argtypes = [ctypes.c_void_p]
        lib.rnnoise_destroy.restype = None
        lib.rnnoise_get_frame_size.restype = ctypes.c_int
        lib.rnnoise_process_frame.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.rnnoise_process_frame.restype = ctypes.c_float
        frame = lib.rnnoise_get_frame_size()
        if frame != FRAME * UP:
            raise DenoiserMissing(f"this RNNoise takes frames of {frame} samples, not {FRAME * UP}")
        _library = lib
    return _library


TYPES = (pb.NOISE_REDUCTION_TYPE_NEAR_FIELD, pb.NOISE_REDUCTION_TYPE_FAR_FIELD)


def offered() -> tuple[pb.NoiseReductionType.ValueType, ...]:
    """The types an engine of the kit declares (``EngineFeatures.noise_reduction_types``):
    both, where RNNoise is installed; none, so that a session asking is refused, typed."""
    try:
        _rnnoise()
    except (DenoiserMissing, OSError):
        return ()
    return TYPES


def _lowpass() -> npt.NDArray[np.float64]:
    n = np.arange(_TAPS) - (_TAPS - 1) / 2
    cutoff = _CUTOFF_HZ / RNNOISE_RATE_HZ
    taps = 2 * cutoff * np.sinc(2 * cutoff * n) * np.kaiser(_TAPS, 8.0)
    return taps / taps.sum()


_LOWPASS = _lowpass()
# Upsampling by zero-stuffing: phase k of each output triple is the input filtered by taps
# k, k+3, ...; the gain of 3 makes up for the stuffed zeros.
_PHASES = [UP * _LOWPASS[k::UP] for k in range(UP)]
_HISTORY = len(_PHASES[0]) - 1  # input samples each upsampled frame needs from before it


@dataclass(frozen=True, slots=True)
class Setting:
    """What one noise reduction type does (see the module docstring)."""

    dry_mix: float  # the input mixed back into RNNoise's output
    target_dbfs: float | None  # the gain stage's speech level; None: no gain stage
    max_gain_db: float = 0.0


SETTINGS = {
    pb.NOISE_REDUCTION_TYPE_NEAR_FIELD: Setting(dry_mix=0.2, target_dbfs=None),
    pb.NOISE_REDUCTION_TYPE_FAR_FIELD: Setting(dry_mix=0.1, target_dbfs=-26.0, max_gain_db=18.0),
}
# The gain stage: frames RNNoise judges speech at least this likely move the level estimate,
# which follows them over about 0.3 s; the gain moves towards its aim over about 50 ms.
_SPEECH_PROBABILITY = 0.6
_LEVEL_SMOOTHING = 0.03
_GAIN_SMOOTHING = 0.2


class Denoiser:
    """One session's noise reduction, with its own RNNoise state and filter history.

    :meth:`process` takes canonical pcm16 input and returns the denoised pcm16 of the whole
    frames it completes (an append of 20 ms in gives 20 ms out; the samples that do not fill a
    frame wait for the next append). Not thread-safe: one session's worker calls it.
    """

    def __init__(self, kind: pb.NoiseReductionType.ValueType) -> None:
        lib = _rnnoise()
        self._process = lib.rnnoise_process_frame
        self._state = lib.rnnoise_create(None)
        if not self._state:
            raise MemoryError("rnnoise_create failed")
        self._finalizer = weakref.finalize(self, lib.rnnoise_destroy, self._state)
        self.kind = kind
        self._setting = SETTINGS[kind]
        self._remainder = np.zeros(0, np.float32)  # input that has not filled a frame yet
        self._up_history = np.zeros(_HISTORY, np.float64)  # for the upsampling filter
        self._down_history = np.zeros(_TAPS - 1, np.float64)  # for the downsampling filter
        self._dry_tail = np.zeros(FRAME * UP, np.float64)  # the input RNNoise's output lags by
        self._frame_in = np.zeros(FRAME * UP, np.float32)
        self._frame_out = np.zeros(FRAME * UP, np.float32)
        self._in_ptr = self._frame_in.ctypes.data
        self._out_ptr = self._frame_out.ctypes.data
        self._level = 10 ** ((self._setting.target_dbfs or -26.0) / 20)
        self._gain = 1.0

    def configure(self, kind: pb.NoiseReductionType.ValueType) -> None:
        """Changes the setting and keeps the state (the noise it has learnt, the remainder)."""
        self.kind = kind
        self._setting = SETTINGS[kind]
        if self._setting.target_dbfs is None:
            self._gain = 1.0

    def close(self) -> None:
        self._finalizer()

    def process(self, pcm: bytes) -> bytes:
        samples = np.frombuffer(pcm, np.int16).astype(np.float32)
        if self._remainder.size:
            samples = np.concatenate([self._remainder, samples])
        whole = samples.size - samples.size % FRAME
        self._remainder = samples[whole:].copy()
        if not whole:
            return b""
        up = self._upsample(samples[:whole])
        dry = self._setting.dry_mix
        out = np.empty_like(up)
        gains = np.empty(whole // FRAME)
        for index in range(whole // FRAME):
            span = slice(index * FRAME * UP, (index + 1) * FRAME * UP)
            self._frame_in[:] = up[span]
            probability = self._process(self._state, self._out_ptr, self._in_ptr)
            out[span] = self._frame_out
            gains[index] = self._next_gain(probability)
        # RNNoise's output is 10 ms behind its input: the dry signal is mixed in as late.
        delayed = self._dry_delay(up)
        if dry:
            out += dry * delayed
        down = self._downsample(out)
        if self._setting.target_dbfs is not None:
            down *= np.repeat(gains, FRAME)
        return np.clip(np.rint(down), -32768, 32767).astype(np.int16).tobytes()

    # -- the parts ---------------------------------------------------------------------------

    def _dry_delay(self, up: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """``up`` delayed by one RNNoise frame, as RNNoise's output is."""
        joined = np.concatenate([self._dry_tail, up])
        self._dry_tail = joined[-FRAME * UP :]
        return joined[: up.size]

    def _upsample(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
        padded = np.concatenate([self._up_history, samples])
        self._up_history = padded[-_HISTORY:]
        up = np.empty(samples.size * UP)
        for k, phase in enumerate(_PHASES):
            up[k::UP] = np.convolve(padded, phase, "valid")
        return up

    def _downsample(self, samples: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        padded = np.concatenate([self._down_history, samples])
        self._down_history = padded[-(_TAPS - 1) :]
        # Only every third output of the filter is kept: each is one dot product.
        windows = np.lib.stride_tricks.sliding_window_view(padded, _TAPS)[UP - 1 :: UP]
        return windows @ _LOWPASS[::-1]

    def _next_gain(self, probability: float) -> float:
        setting = self._setting
        if setting.target_dbfs is None:
            return 1.0
        if probability >= _SPEECH_PROBABILITY:
            rms = float(np.sqrt(np.mean(np.square(self._frame_out)))) / _SCALE
            if rms > 0:
                self._level += _LEVEL_SMOOTHING * (rms - self._level)
        aim = min(
            10 ** (setting.max_gain_db / 20),
            max(1.0, 10 ** (setting.target_dbfs / 20) / max(self._level, 1e-6)),
        )
        self._gain += _GAIN_SMOOTHING * (aim - self._gain)
        return self._gain
