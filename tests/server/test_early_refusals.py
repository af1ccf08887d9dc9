"""A call refused before it is served (no valid key, no place left) on a real server and port:
its first write lands and the client reads the refusal's own status.

grpc.aio's client reports a write that the status overtook as ``INTERNAL`` ("Internal error
from Core"), without the code or its retry delay; a server that refused at once lost that race
about once in 400 opens here. The server now reads the first message, if it comes within a
short grace, before it refuses (``omni_grpc.server.status.refuse_call``).
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import AsyncIterator
from types import FrameType

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server import status
from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from tests.server.streams import open_stream
from tests.serving import serving, settings

KEY = (("authorization", "Bearer secret-key"),)
OPEN = pb.ConverseRequest(open_session=pb.OpenSession())
# A client that writes this long after its call started still has its write land (the grace
# is made long here, so that a loaded machine cannot make the write late).
WRITE_AFTER_S = 0.05
SERVER_CODE = os.path.dirname(status.__file__)  # the server's own modules


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    """Keys required, and one place per key: a key's second open is refused for want of one."""
    keys = ("secret-key", "other-key")
    async with serving(settings(api_keys=keys, max_streams_per_key=1)) as running:
        yield running


async def _refused_after_a_late_write(
    stub: duplex_pb2_grpc.DuplexServiceStub, metadata: tuple[tuple[str, str], ...] | None
) -> grpc.aio.AioRpcError:
    call = stub.Converse(metadata=metadata)
    await asyncio.sleep(WRITE_AFTER_S)
    await call.write(OPEN)  # the refusal waited for it: the write does not fail
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call.read()
    return refused.value


async def test_a_call_without_a_key_reads_unauthenticated_after_its_write(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(status, "FIRST_WRITE_GRACE_S", 10.0)
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        for metadata in (None, (("authorization", "Bearer wrong"),)):
            refused = await _refused_after_a_late_write(stub, metadata)
            assert refused.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_call_without_a_place_reads_its_retry_delay_after_its_write(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(status, "FIRST_WRITE_GRACE_S", 10.0)
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        held, _ = await open_stream(stub, metadata=KEY)  # the one place
        refused = await _refused_after_a_late_write(stub, KEY)
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        rich = rpc_status.from_call(refused)
        assert rich is not None
        delays = [d for d in rich.details if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR)]
        assert delays, rich  # retryable: the client is told when to come back
        held.cancel()


async def test_a_refused_call_that_never_writes_is_still_refused(server: RunningServer) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        call = duplex_pb2_grpc.DuplexServiceStub(channel).Converse()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await asyncio.wait_for(call.read(), 30)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_refused_stream_leaves_nothing_for_the_cycle_collector(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream refused for want of a key or a place is ended by setting its status, not by
    an abort, whose exception would hold the handler's frames, and they the call: a cycle per
    refusal, which under a key's churn of refused calls made long full collections."""
    monkeypatch.setattr(status, "FIRST_WRITE_GRACE_S", 10.0)
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        held, _ = await open_stream(stub, metadata=KEY)  # the one place
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds is kept in gc.garbage
        try:
            for metadata in (KEY, None) * 5:
                await _refused_after_a_late_write(stub, metadata)
            gc.collect()
            left = [
                found
                for found in gc.garbage
                if isinstance(found, grpc.aio.AbortError)
                or (isinstance(found, FrameType) and SERVER_CODE in found.f_code.co_filename)
            ]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        assert left == []
        held.cancel()
