"""A stub on the shared ``server`` (tests/conftest.py), for server tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import RunningServer


@pytest.fixture
async def stub(server: RunningServer) -> AsyncIterator[duplex_pb2_grpc.DuplexServiceStub]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield duplex_pb2_grpc.DuplexServiceStub(channel)
