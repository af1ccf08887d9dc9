"""What every tier shares: the one started server.

``server`` is a real gRPC server on a free port (tests/serving.py), stopped after the test. It
starts with the ``server_settings`` fixture on the ``server_clock`` fixture; a tier, a module or
a test overrides either where it differs (a key, a limit, TLS, a clock it moves by hand), by
defining a fixture of that name or by parametrizing it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import pytest

from omni_grpc.server.app import RunningServer
from omni_grpc.server.settings import ServerSettings
from tests.serving import serving, settings

# -- the one server ------------------------------------------------------------------------


@pytest.fixture
def server_settings() -> ServerSettings:
    """What ``server`` starts with: ``settings()``, the loopback engine at fast pace."""
    return settings()


@pytest.fixture
def server_clock() -> Callable[[], float]:
    """What ``server`` measures session deadlines on."""
    return time.monotonic


@pytest.fixture
async def server(
    server_settings: ServerSettings, server_clock: Callable[[], float]
) -> AsyncIterator[RunningServer]:
    """A started server on a free port, stopped after the test."""
    async with serving(server_settings, clock=server_clock) as running:
        yield running
