"""What the vLLM tier shares: a tiny model, one loaded vLLM for the whole run, and the marks.

The tier runs in ``.venv-vllm`` (``scripts/vllm_env.sh``), never in the main ``.venv``; every
test of it carries :data:`VLLM_MARKS`. Importing this module imports no vLLM: the runtime is
made on first use, in vLLM's in-process mode (the model runs inside the engine-core process
rather than in a worker of its own), eager (no graph compilation), with a 64 MiB KV cache.
Loading it takes tens of seconds on two cores, so one runtime serves every test of a run;
each test makes its own :class:`VllmEngine` (sessions, speech) on it and may stop that engine,
which leaves a runtime it did not make running. The runtime stops when the process exits.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import sys
import threading
from pathlib import Path

import pytest

from omni_grpc.engine.vllm import VllmEngine, VllmOptions, VllmRuntime
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]

# vLLM, torch and transformers warn about their own internals (deprecated torch.jit APIs,
# renamed torch.distributed names, a zmq context vLLM leaves to the collector); the project
# turns warnings into errors, so the tier lets these, and only these, pass.
WARNING_FILTERS = (
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning",
    "ignore:`torch.distributed.reduce_op` is deprecated:FutureWarning",
    "ignore:Unclosed context:ResourceWarning",
)
# The first test of a run also loads the model: tens of seconds on two busy cores.
VLLM_MARKS = [
    pytest.mark.vllm,
    pytest.mark.timeout(300),
    *(pytest.mark.filterwarnings(f) for f in WARNING_FILTERS),
]

# Everything vLLM needs to run the tiny model on two cores without touching the network.
_ENVIRONMENT = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
EOS_ID = 0  # <|endoftext|> of the tiny model's tokenizer
ANSWER_TOKENS = 16


def tiny_options(**overrides: str) -> dict[str, str]:
    """Engine options for the tiny Qwen2-Audio model on a CPU.

    A random model almost never samples its end token, so every answer would run to
    max_tokens and end "incomplete". A strong bias on the end token, held off by min_tokens,
    makes every answer exactly ANSWER_TOKENS tokens and end normally, whatever the audio.
    Greedy sampling makes the tokens a function of the prompt (and so of the audio).
    """
    model = load_script("make_tiny_models").ensure("qwen2-audio")
    options = {
        "model": str(model),
        "dtype": "float32",
        "max_model_len": "2048",
        "kv_cache_bytes": str(64 * 2**20),
        "executor": "uni",
        "enforce_eager": "true",
        "max_num_seqs": "8",
        "temperature": "0",
        "min_tokens": str(ANSWER_TOKENS),
        "max_tokens": "64",
        "logit_bias": f"{EOS_ID}:100",
        "speed": "4",
        # The tier's tests commit every turn themselves, with synthetic audio a detector might
        # take for speech; the tests of server VAD turn it on (test_vllm_hearing.py).
        "server_vad": "off",
    }
    options.update(overrides)
    return options


_shared: VllmRuntime | None = None
_shared_lock = threading.Lock()


def shared_runtime() -> VllmRuntime:
    """The run's one runtime (not started: an engine's ``start`` starts it)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            for key, value in _ENVIRONMENT.items():
                os.environ.setdefault(key, value)
            _shared = VllmRuntime(VllmOptions.parse(tiny_options()))
            atexit.register(_stop_shared_at_exit)
        return _shared


def stop_shared() -> None:
    """Stops the shared runtime, if it was started (the tier's conftest does at the end)."""
    if _shared is not None and _shared.started:
        asyncio.run(_shared.stop())


def _stop_shared_at_exit() -> None:
    # A run without the tier's conftest stops the runtime here, after pytest has closed the
    # streams vLLM's log handlers write to: point them at the real stderr first.
    for handler in logging.getLogger("vllm").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.stream = sys.__stderr__
    stop_shared()


def make_engine(**overrides: str) -> VllmEngine:
    """A vllm engine on the shared runtime; ``overrides`` may change how it samples and
    speaks, not its vLLM settings."""
    return VllmEngine(tiny_options(**overrides), runtime=shared_runtime())


def conformance_spec() -> object:
    """The vllm entry of the engine conformance suite (``tests/engine/test_conformance.py``)."""
    from tests.engine.conformance import EngineSpec

    spec = EngineSpec("vllm", make_engine, 30.0)
    return pytest.param(spec, marks=VLLM_MARKS, id="vllm")


def hearing_spec() -> object:
    """The vllm entry of the hearing conformance suite (server VAD on, real speech:
    ``tests/engine/test_conformance_hearing.py``)."""
    from tests.engine.conformance import EngineSpec

    spec = EngineSpec("vllm", lambda: make_engine(server_vad="on", pace="fast"), 60.0)
    return pytest.param(spec, marks=VLLM_MARKS, id="vllm")
