"""A real server on a free local port (tests/serving.py) and a stub on it, for server tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import RunningServer
from tests.serving import serving


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    async with serving() as running:
        yield running


@pytest.fixture
async def stub(server: RunningServer) -> AsyncIterator[duplex_pb2_grpc.DuplexServiceStub]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield duplex_pb2_grpc.DuplexServiceStub(channel)
