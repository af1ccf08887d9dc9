"""Fixtures of the vLLM tier: engines on the run's one vLLM runtime (see :mod:`.support`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from omni_grpc.engine.vllm import VllmEngine

from .support import make_engine, stop_shared


@pytest.fixture
async def engine() -> AsyncIterator[VllmEngine]:
    """A started vllm engine with the tier's default options, stopped after the test."""
    built = make_engine()
    await built.start()
    yield built
    await built.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "vllm_omni: needs vLLM-Omni (runs in .venv-vllm-omni, see tests/vllm/omni)"
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Shuts the run's vLLM down while pytest still shows what it logs."""
    stop_shared()
