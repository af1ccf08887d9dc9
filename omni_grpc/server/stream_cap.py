"""One bound on the Converse streams a server carries, whichever way they came.

A stream comes as a ``Converse`` call, as a stream of a ``ConverseMany`` call, or from a bridge
in the same process (:mod:`omni_grpc.server.local`). gRPC's ``maximum_concurrent_rpcs`` counts
calls only: a ``ConverseMany`` call carrying a thousand streams is one call to it, and an
in-process stream is none. So every stream takes a place in one :class:`StreamCap` while it is
attached, and the one beyond ``--max-concurrent-streams`` is refused as gRPC refuses a call
beyond its own limit (``RESOURCE_EXHAUSTED``, gRPC's own words), wherever it came from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

import grpc

# What gRPC itself answers a call beyond maximum_concurrent_rpcs; said the same way here.
TOO_MANY_STREAMS = "Concurrent RPC limit exceeded!"
CONVERSE = "/omni.duplex.v1.DuplexService/Converse"
Behaviour = Callable[[object, grpc.aio.ServicerContext], Awaitable[None]]


class StreamCap:
    """The streams open now, against the server's one limit."""

    __slots__ = ("limit", "open")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def take(self) -> bool:
        """Takes a place; False (nothing taken) when every place is held."""
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def give(self) -> None:
        """Gives back a place that ``take`` gave."""
        self.open -= 1


class CappedConverse(grpc.aio.ServerInterceptor):
    """Makes each Converse call hold a place in the cap while it runs.

    Placed after the key check, so a call without a valid key is refused before it takes a
    place. The cost is per call (one wrapper coroutine), nothing per message.
    """

    def __init__(self, cap: StreamCap) -> None:
        self._cap = cap

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method != CONVERSE:
            return handler
        # The servicer's Converse is a coroutine on the aio server (the stubs type it sync).
        behaviour = cast(Behaviour, handler.stream_stream)
        cap = self._cap

        async def capped(request_iterator: object, context: grpc.aio.ServicerContext) -> None:
            if not cap.take():
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, TOO_MANY_STREAMS)
            try:
                await behaviour(request_iterator, context)
            finally:
                cap.give()

        return grpc.stream_stream_rpc_method_handler(
            capped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


__all__ = ["TOO_MANY_STREAMS", "CappedConverse", "StreamCap"]
