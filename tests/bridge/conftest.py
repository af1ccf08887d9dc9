"""Fixtures of the bridge tests; the helpers they use live in ``tests.bridge.testkit``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from omni_grpc.server.app import RunningServer
from tests.bridge.testkit import check_server_event, running_bridge, service_settings, speech_pcm24
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


@pytest.fixture(params=["grpc", "multiplexed", "in_process"])
async def bridge_port(service: RunningServer, request: pytest.FixtureRequest) -> AsyncIterator[int]:
    """A bridge in front of ``service``: a Converse call per websocket, the websockets' streams
    on a few ConverseMany calls (``omni-grpc bridge``), and in-process (``omni-grpc serve``),
    so the tests that take it hold for every path."""
    if request.param == "in_process":
        async with running_bridge(service) as port:
            yield port
    else:
        multiplex = request.param == "multiplexed"
        async with running_bridge(service.target, multiplex=multiplex) as port:
            yield port


@pytest.fixture(scope="session")
def speech() -> bytes:
    """Real speech, pcm16 mono at 24 kHz, made once per test run."""
    return speech_pcm24()
