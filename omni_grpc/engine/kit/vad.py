"""Streaming Silero v6 voice activity detection through onnxruntime.

faster-whisper ships the model (``faster_whisper/assets/silero_vad_v6.onnx``), so VAD costs no
extra download. The model reads 512-sample windows at 16 kHz (32 ms) together with the last
64 samples of the window before, and carries an LSTM state (``h``, ``c``) from window to
window; :class:`VadStream` keeps that state, plus the samples that do not yet fill a window,
for one session. One :class:`SileroVad` (the ONNX session, which is thread-safe for ``run``)
serves every stream of an engine.
"""

from __future__ import annotations

import os

import numpy as np
import numpy.typing as npt

from omni_grpc.audio.formats import samples_from_pcm16
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ

# Silero's 16 kHz model reads canonical input as it is.
WINDOW_SAMPLES = 512
WINDOW_MS = WINDOW_SAMPLES * 1000 / CANONICAL_INPUT_RATE_HZ  # 32 ms
CONTEXT_SAMPLES = 64
_STATE_SHAPE = (1, 1, 128)


def silero_model_path() -> str:
    """The Silero v6 ONNX file bundled with faster-whisper."""
    import faster_whisper  # type: ignore[import-untyped]

    path = os.path.join(os.path.dirname(faster_whisper.__file__), "assets", "silero_vad_v6.onnx")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Silero VAD model missing from faster-whisper: {path}")
    return path


class SileroVad:
    """The loaded model; one per engine, shared by every session's :class:`VadStream`."""

    def __init__(self, path: str | None = None) -> None:
        import onnxruntime  # type: ignore[import-untyped]

        options = onnxruntime.SessionOptions()
        # One window is a few hundred microseconds of work: threads would only add overhead
        # and compete with ASR and the LM for the two cores.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 4
        self._session = onnxruntime.InferenceSession(
            path or silero_model_path(), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def stream(self) -> VadStream:
        """A fresh detector state for one input stream."""
        return VadStream(self)

    def run(
        self,
        window: npt.NDArray[np.float32],
        h: npt.NDArray[np.float32],
        c: npt.NDArray[np.float32],
    ) -> tuple[float, npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """One step: a (1, 576) window with its context → (speech probability, h, c)."""
        prob, h_out, c_out = self._session.run(None, {"input": window, "h": h, "c": c})
        return float(np.asarray(prob).reshape(-1)[0]), h_out, c_out


class VadStream:
    """Speech probabilities of one continuous 16 kHz stream, window by window."""

    def __init__(self, model: SileroVad) -> None:
        self._model = model
        self.reset()

    def reset(self) -> None:
        """Forgets everything heard: the recurrent state, the context and partial windows."""
        self._h = np.zeros(_STATE_SHAPE, np.float32)
        self._c = np.zeros(_STATE_SHAPE, np.float32)
        self._context = np.zeros(CONTEXT_SAMPLES, np.float32)
        self._pending = np.zeros(0, np.float32)
        self.windows = 0  # windows scored since the reset; window k covers [32k, 32k+32) ms

    def feed(self, pcm16: bytes) -> list[float]:
        """Scores every whole window the new audio completes; returns their probabilities."""
        samples = samples_from_pcm16(pcm16)
        data = np.concatenate([self._pending, samples]) if self._pending.size else samples
        whole = data.size - data.size % WINDOW_SAMPLES
        probs: list[float] = []
        for start in range(0, whole, WINDOW_SAMPLES):
            window = data[start : start + WINDOW_SAMPLES]
            framed = np.concatenate([self._context, window])[None, :]
            prob, self._h, self._c = self._model.run(framed, self._h, self._c)
            self._context = window[-CONTEXT_SAMPLES:]
            probs.append(prob)
        self._pending = data[whole:].copy()
        self.windows += len(probs)
        return probs
