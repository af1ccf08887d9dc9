"""One loaded embedded engine for all the embedded tests, and test speech made by espeak-ng.

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


def _load_speech_maker() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "scripts" / "make_test_speech.py"
    spec = importlib.util.spec_from_file_location("make_test_speech", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


speech = _load_speech_maker()


@pytest.fixture(scope="session")
def engine() -> Iterator[EmbeddedEngine]:
    """The embedded engine with the echo responder; sessions pick their own pace."""
    if not speech.espeak_available():
        pytest.fail("espeak-ng is not installed; scripts/_env.sh installs it with apt-get")
    built = EmbeddedEngine({"responder": "echo"})
    built.load()
    yield built
    asyncio.run(built.stop())
