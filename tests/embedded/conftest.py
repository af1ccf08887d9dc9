"""One loaded embedded engine for all the embedded tests, test speech made by espeak-ng, and
the speech test set with its word error rate.

Loading Whisper and Silero takes a few seconds, so the engine is built once per test run;
each test opens its own sessions on it, in its own event loop (the engine's worker threads
belong to no loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from tests.conftest import loads_models
from tests.scripts import load_script

speech = load_script("make_test_speech")
speech_set = load_script("speech_set")  # the speech test set (after make_test_speech)
word_error_rate = load_script("word_error_rate")


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
