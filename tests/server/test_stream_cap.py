"""One stream limit for every kind of stream, on a real server and port: Converse calls,
ConverseMany's streams and in-process streams take places in the same cap, and the stream
beyond it is refused alike, whichever way it came; a place given back is taken again."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from bridge.transport import ServiceStream
from omni_grpc.client.channel import ChannelSettings, Connection
from omni_grpc.client.multiplex import MultiplexedConnection
from omni_grpc.server.app import RunningServer
from omni_grpc.server.local import LocalService
from omni_grpc.server.settings import ServerSettings
from omni_grpc.wire import pb
from omni_grpc.wire.stream_end import StreamBroken
from tests.serving import eventually, serving, settings

OPEN = pb.ConverseRequest(open_session=pb.OpenSession())
LIMIT = 3


async def _opened(stream: ServiceStream) -> None:
    await stream.write(OPEN)
    created = await asyncio.wait_for(stream.read(), 10)
    assert created is not None and created.WhichOneof("event") == "session_created"


async def _refused(stream: ServiceStream) -> StreamBroken:
    with pytest.raises(StreamBroken) as refused:
        await stream.write(OPEN)  # a call refused at once may fail the write already
        await asyncio.wait_for(stream.read(), 10)
    return refused.value


async def test_converse_multiplexed_and_in_process_streams_share_one_cap() -> None:
    async with serving(settings(max_concurrent_streams=LIMIT)) as running:
        local = running.local
        assert isinstance(local, LocalService)
        target = ChannelSettings(target=running.target)
        plain, many = Connection(target), MultiplexedConnection(target, calls=1)
        try:
            in_process = local.converse()
            for stream in (plain.converse(), many.converse(), in_process):
                await _opened(stream)
            assert local.streams == LIMIT

            refusals = [
                await _refused(plain.converse()),
                await _refused(many.converse()),
                await _refused(local.converse()),
            ]
            assert {(r.status, str(r)) for r in refusals} == {
                (
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "RESOURCE_EXHAUSTED: Concurrent RPC limit exceeded!",
                )
            }
            assert len(running.registry) == LIMIT  # the refused ones opened nothing

            in_process.cancel()  # its place goes back, and a Converse call takes it
            await _opened(plain.converse())
            assert local.streams == LIMIT
        finally:
            await plain.close()
            await many.close()


@pytest.fixture
def server_settings() -> ServerSettings:
    """The shared ``server`` has the cap."""
    return settings(max_concurrent_streams=LIMIT)


async def test_a_refused_converse_call_gives_its_place_back(server: RunningServer) -> None:
    running = server
    assert running.local is not None
    connection = Connection(ChannelSettings(target=running.target))
    try:
        refused = connection.converse()
        await refused.write(pb.ConverseRequest(client_seq=5, open_session=pb.OpenSession()))
        with pytest.raises(StreamBroken):
            await asyncio.wait_for(refused.read(), 10)
        # The place goes back when the call's handler returns, just after its status.
        await eventually(lambda: running.local is not None and running.local.streams == 0)
    finally:
        await connection.close()
