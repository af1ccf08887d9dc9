"""Two clients behind one proxy, one of them flooding: the replicas bound each client's address,
not the proxy's. HAProxy says who its client was (``option forwardfor``), the replicas believe it
from the proxy only (``--trusted-proxy``, which scripts/cluster sets), and so the flooder meets
its own bound (``RESOURCE_EXHAUSTED``, "this address holds its share of streams", with its
retry hint, typed through the proxy) while the other client opens its streams.

The clients reach HAProxy from addresses of their own (127.0.0.2 and 127.0.0.3: all of 127/8 is
this machine's), each through a small forwarder that binds its side of the connection to it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.wire import pb
from omni_grpc.wire.stream_end import StreamBroken
from tests.cluster.local import LOOPBACK, LocalCluster

PER_ADDRESS = 2  # streams one client address may hold on each replica
REPLICAS = 3
OPEN = pb.ConverseRequest(open_session=pb.OpenSession())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(
        tmp_path, serve_args=(*LOOPBACK, "--max-streams-per-peer", str(PER_ADDRESS))
    )
    try:
        yield local.wait_ready()
    finally:
        local.stop()


@contextlib.asynccontextmanager
async def from_address(source: str, target: str) -> AsyncIterator[str]:
    """A local port whose connections reach ``target`` from ``source``; yields its address.
    Every socket it made is closed on the way out (none is left to the collector)."""
    host, port = target.rsplit(":", 1)
    writers: set[asyncio.StreamWriter] = set()
    pipes: set[asyncio.Task[None]] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        up_reader, up_writer = await asyncio.open_connection(
            host, int(port), local_addr=(source, 0)
        )
        writers.add(up_writer)
        both = asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        pipes.add(both)  # type: ignore[arg-type]
        await both

    server = await asyncio.start_server(forward, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for task in pipes:
            task.cancel()
        for writer in writers:
            writer.close()
        for writer in writers:
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        await server.wait_closed()


async def open_streams(
    stub: duplex_pb2_grpc.DuplexServiceStub, count: int
) -> tuple[list[grpc.aio.StreamStreamCall], list[StreamBroken]]:
    """Opens ``count`` sessions one after another; the calls that got one, and the refusals."""
    held, refused = [], []
    for _ in range(count):
        call = stub.Converse()
        await call.write(OPEN)
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as error:
            refused.append(StreamBroken.from_error(error))
            continue
        assert first.HasField("session_created"), first
        held.append(call)
    return held, refused


async def test_a_flooding_client_behind_the_proxy_meets_its_own_bound_only(
    cluster: LocalCluster,
) -> None:
    async with (
        from_address("127.0.0.2", cluster.target) as flooder_port,
        from_address("127.0.0.3", cluster.target) as victim_port,
        grpc.aio.insecure_channel(flooder_port) as flooder,
        grpc.aio.insecure_channel(victim_port) as victim,
    ):
        flood, refused = await open_streams(
            duplex_pb2_grpc.DuplexServiceStub(flooder), PER_ADDRESS * REPLICAS + 4
        )
        assert len(flood) <= PER_ADDRESS * REPLICAS and refused, (len(flood), refused)
        # Typed through the proxy (its status in the headers too): the address's bound, retryable.
        assert {r.code for r in refused} == {"resource_exhausted"}, refused
        assert all("this address holds its share" in str(r) for r in refused), refused
        assert all(r.retry_after_s > 0 for r in refused), refused
        # The other client, behind the same proxy, is not counted with the flooder.
        held, turned_away = await open_streams(
            duplex_pb2_grpc.DuplexServiceStub(victim), PER_ADDRESS
        )
        assert not turned_away and len(held) == PER_ADDRESS, turned_away
        for call in (*flood, *held):
            call.cancel()
