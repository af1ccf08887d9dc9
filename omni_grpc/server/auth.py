"""Optional API keys: every call must present ``authorization: Bearer <key>``.

Keys are compared with ``hmac.compare_digest`` against every configured key (no early exit),
so response timing does not reveal how much of a guess was right. Keys are never logged.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence

import grpc

from omni_grpc.server.status import unauthenticated


def key_matches(presented: str, keys: Sequence[str]) -> bool:
    """Says in constant time (per key) whether ``presented`` is one of ``keys``."""
    ok = False
    candidate = presented.encode()
    for key in keys:
        ok |= hmac.compare_digest(candidate, key.encode())
    return ok


def bearer_key(metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
    """Extracts the bearer key from call metadata; empty when there is none."""
    for name, value in metadata or ():
        if name == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer ") :]
    return ""


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
