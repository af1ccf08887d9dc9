"""The vllm-omni engine: natively duplex models (MiniCPM-o, ...) served by vLLM-Omni.

vLLM-Omni runs full-duplex sessions inside its engine (``DuplexOmni``: open a session, submit
commands to its handle, read its events, close it); the model itself decides when to listen
and when to speak. This engine opens one vLLM-Omni session per session of ours and
translates both ways: our commands into vLLM-Omni's (:mod:`.commands`), its events, in their
Realtime wire form, into ours (:mod:`.events`). Resume and detach stay in our core, above
the engine, so vLLM-Omni's own resume is not used.

Importing this package imports no vLLM-Omni; creating the engine checks it is installed.
``DuplexOmni`` needs GPUs (CUDA stage workers); on a GPU machine::

    omni-grpc serve --engine vllm-omni --engine-option model=openbmb/MiniCPM-o-4_5 \\
        --engine-option ref_audio=file:///srv/voices/assistant.wav

Options: :mod:`.options`.
"""

from __future__ import annotations

from omni_grpc.engine.vllm_omni.engine import FEATURES, VllmOmniEngine, VllmOmniUnavailable
from omni_grpc.engine.vllm_omni.options import VllmOmniOptions
from omni_grpc.engine.vllm_omni.session import VllmOmniSession

__all__ = [
    "FEATURES",
    "VllmOmniEngine",
    "VllmOmniOptions",
    "VllmOmniSession",
    "VllmOmniUnavailable",
]
