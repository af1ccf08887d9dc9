"""Optional API keys: every call must present ``authorization: Bearer <key>``.

The comparison itself is :mod:`omni_grpc.wire.keys`, shared with the bridge. Keys are never
logged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import grpc

from omni_grpc.server.status import unauthenticated
from omni_grpc.wire.keys import bearer_key, key_matches


class ApiKeyInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call, health and reflection included, that lacks a valid key."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = tuple(keys)
        status = unauthenticated()

        async def refuse(request: object, context: grpc.aio.ServicerContext) -> None:
            await context.abort(status.code, status.details, status.trailing_metadata)

        self._refusals = {
            (False, False): grpc.unary_unary_rpc_method_handler(refuse),
            (True, False): grpc.stream_unary_rpc_method_handler(refuse),
            (False, True): grpc.unary_stream_rpc_method_handler(refuse),
            (True, True): grpc.stream_stream_rpc_method_handler(refuse),
        }

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        if key_matches(bearer_key(handler_call_details.invocation_metadata), self._keys):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        shape = (handler.request_streaming, handler.response_streaming)
        return self._refusals[shape]
