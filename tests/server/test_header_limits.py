"""A call's headers are bounded at the HTTP/2 layer, on a real server and port: a call whose
metadata passes the hard limit (16 KiB) is refused before any handler runs, the connection and
the server serve the next call, and our own headers stay far inside the limit."""

from __future__ import annotations

import grpc

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.wire import pb
from tests.serving import serving, settings

HARD_LIMIT = 16 * 1024


async def test_a_call_with_3000_metadata_entries_is_refused_and_the_next_is_served() -> None:
    async with serving(settings()) as running, grpc.aio.insecure_channel(running.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        flood = tuple((f"x-m-{k}", "v") for k in range(3000))
        try:
            await stub.GetCapabilities(pb.GetCapabilitiesRequest(), metadata=flood)
            raise AssertionError("a call with 3000 metadata entries was served")
        except grpc.aio.AioRpcError as refused:
            assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        # Just under the limit, with our own headers' kind: served, on the same channel.
        large = (("x-route", "r" * (HARD_LIMIT // 4)),)
        reply = await stub.GetCapabilities(pb.GetCapabilitiesRequest(), metadata=large)
        assert reply.capabilities.max_message_bytes > 0
