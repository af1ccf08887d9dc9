"""Fixtures of the bridge tests; the helpers they use live in ``bridge_testkit``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from bridge_testkit import check_server_event, running_bridge, service_settings, speech_pcm24

from omni_grpc.server.app import RunningServer
from tests.serving import serving


@pytest.fixture
def check_event() -> Callable[[dict[str, Any]], None]:
    """The schema check as a fixture, for tests that take it as an argument."""
    return check_server_event


@pytest.fixture
async def service() -> AsyncIterator[RunningServer]:
    """A loopback service at fast pace on a free port."""
    async with serving(service_settings()) as running:
        yield running


@pytest.fixture(params=["grpc", "in_process"])
async def bridge_port(service: RunningServer, request: pytest.FixtureRequest) -> AsyncIterator[int]:
    """A bridge in front of ``service``: over gRPC (``omni-grpc bridge``) and in-process
    (``omni-grpc serve``), so the tests that take it hold for both paths."""
    async with running_bridge(service.target if request.param == "grpc" else service) as port:
        yield port


@pytest.fixture(scope="session")
def speech() -> bytes:
    """Real speech, pcm16 mono at 24 kHz, made once per test run."""
    return speech_pcm24()
