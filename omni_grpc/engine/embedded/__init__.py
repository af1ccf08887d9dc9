"""The embedded engine: a real, offline speech loop on the CPU.

Silero v6 (ONNX) hears speech and ends turns, Whisper base (faster-whisper, int8; tiny.en as
an option) transcribes them, a responder writes the answer (SmolLM2-135M-Instruct, or a
deterministic echo), and espeak-ng speaks it sentence by sentence while the rest is still
being written.
Every model ships inside a pip package (or, for espeak-ng, the OS), so nothing is downloaded
at run time. Models load once per engine, in :meth:`EmbeddedEngine.start`; sessions share
them, and their heavy work runs on worker threads so the event loop never waits on a model.

Options are described by :class:`EmbeddedOptions`; a session may also choose its own
``responder`` and ``pace`` through ``SessionConfig.engine_options``.
"""

from __future__ import annotations

from omni_grpc.engine.embedded.engine import FEATURES, EmbeddedEngine
from omni_grpc.engine.embedded.options import EmbeddedOptions
from omni_grpc.engine.embedded.session import EmbeddedSession

__all__ = ["FEATURES", "EmbeddedEngine", "EmbeddedOptions", "EmbeddedSession"]
