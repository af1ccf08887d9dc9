"""A real server on a free local port, with the loopback engine, for every server test."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import grpc
import pytest

from omni_grpc.core import Limits
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import RunningServer, start_server
from omni_grpc.server.settings import ServerSettings

FAST = {"pace": "fast"}


def settings(**overrides: object) -> ServerSettings:
    """Test settings: port 0, no bridge, fast loopback, short grace."""
    base = ServerSettings(
        grpc_port=0,
        http_port=None,
        engine="loopback",
        engine_options=FAST,
        limits=Limits(disconnect_grace_s=2.0),
    )
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    running = await start_server(settings())
    yield running
    await running.stop()


@pytest.fixture
async def stub(server: RunningServer) -> AsyncIterator[duplex_pb2_grpc.DuplexServiceStub]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield duplex_pb2_grpc.DuplexServiceStub(channel)
