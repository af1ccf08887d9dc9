"""One loaded embedded engine for all the embedded tests, test speech made by espeak-ng, and
the speech test set with its word error rate.

Loading Whisper and Silero takes a few seconds, so the engine is built once per test run;
each test opens its own sessions on it, in its own event loop (the engine's worker threads
belong to no loop).
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from tests.conftest import loads_models


def _load_script(name: str) -> ModuleType:
    """A module of scripts/ (not a package), by its name."""
    path = Path(__file__).resolve().parents[2] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Dataclasses look their module up by name, and the scripts import each other by name.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


speech = _load_script("make_test_speech")
speech_set = _load_script("speech_set")  # the speech test set (after make_test_speech)
word_error_rate = _load_script("word_error_rate")


@pytest.fixture(scope="session")
@loads_models
def engine() -> Iterator[EmbeddedEngine]:
    """The embedded engine with the echo responder (and SmolLM2 to judge the end of turns
    under semantic detection); sessions pick their own pace."""
    if not speech.espeak_available():
        pytest.fail("espeak-ng is not installed; scripts/_env.sh installs it with apt-get")
    built = EmbeddedEngine({"responder": "echo", "turn_judge": "on"})
    built.load()
    yield built
    asyncio.run(built.stop())
