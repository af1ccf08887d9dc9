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
from omni_grpc.server.stream_cap import PER_KEY, PER_PEER, STREAMS, StreamCap, peer_address
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


# -- the places of keys and peers ---------------------------------------------------------


def test_a_key_and_a_peer_hold_at_most_their_places() -> None:
    cap = StreamCap(10, per_key=2, per_peer=3)
    assert cap.take("a", "ipv4:10.0.0.1") is None
    assert cap.take("a", "ipv4:10.0.0.2") is None
    assert cap.take("a", "ipv4:10.0.0.3") == PER_KEY
    refused = cap.refusal(PER_KEY)
    assert refused is not None and (refused.code, refused.retryable) == ("resource_exhausted", True)
    assert "API key" in refused.message and cap.open == 2  # nothing taken
    assert cap.take("b", "ipv4:10.0.0.1") is None
    assert cap.take("c", "ipv4:10.0.0.1", stream=False) is None  # a call, not a stream
    assert cap.take("d", "ipv4:10.0.0.1") == PER_PEER
    refused = cap.refusal(PER_PEER)
    assert refused is not None and "address" in refused.message
    assert cap.open == 3
    cap.give("a", "ipv4:10.0.0.1")
    assert cap.take("a", "ipv4:10.0.0.3") is None


def test_the_empty_key_and_peer_are_never_bounded_apart() -> None:
    cap = StreamCap(4, per_key=1, per_peer=1)
    for _ in range(4):
        assert cap.take("", "") is None  # no key, no address: only the streams count
    assert cap.take() == STREAMS and cap.refusal(STREAMS) is None  # in gRPC's own words


def test_streams_run_short_at_three_quarters() -> None:
    cap = StreamCap(8)
    for _ in range(5):
        cap.take()
    assert not cap.short.is_set()
    cap.take()
    assert cap.short.is_set()
    cap.give()
    assert not cap.short.is_set()


@pytest.mark.parametrize(
    ("peer", "address"),
    [
        ("ipv4:10.0.0.7:51234", "ipv4:10.0.0.7"),
        ("ipv6:[::1]:51234", "ipv6:[::1]"),
        ("unix:omni.sock", "unix:omni.sock"),
    ],
)
def test_a_peer_is_known_by_its_address(peer: str, address: str) -> None:
    assert peer_address(peer) == address
