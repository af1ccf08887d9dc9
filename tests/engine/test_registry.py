"""Engines are found by name and imported only when asked for."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from omni_grpc.engine import create_engine, known_engines
from omni_grpc.engine.loopback import LoopbackEngine


def test_loopback_is_known_and_built_with_its_options() -> None:
    assert "loopback" in known_engines()
    engine = create_engine("loopback", {"pace": "fast", "chunk_ms": "40"})
    assert isinstance(engine, LoopbackEngine)
    assert (engine.options.pace, engine.options.chunk_ms) == ("fast", 40)


def test_an_unknown_engine_is_refused_with_the_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown engine 'nope'; known engines: .*loopback"):
        create_engine("nope", {})


@pytest.mark.subprocess
def test_engines_are_imported_lazily_and_loopback_needs_no_model_runtime() -> None:
    script = (
        "import json, sys\n"
        "import omni_grpc.engine as engines\n"
        "before = 'omni_grpc.engine.loopback' in sys.modules\n"
        "engines.create_engine('loopback', {})\n"
        "heavy = sorted(m for m in ('torch', 'vllm', 'transformers', 'onnxruntime')"
        " if m in sys.modules)\n"
        "print(json.dumps([before, 'omni_grpc.engine.loopback' in sys.modules, heavy]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [False, True, []]
