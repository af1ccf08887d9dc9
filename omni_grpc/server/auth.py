"""Optional API keys: every call must present ``authorization: Bearer <key>``, but probes.

``ConverseMany`` is no exception: its call presents a key like any other, refused
``UNAUTHENTICATED`` before a message is read, and each of its streams presents one again
(checked per stream, as its session is bound to that key).

The comparison itself is :mod:`omni_grpc.wire.keys`, shared with the bridge. Keys are never
logged. Health checks can be served without a key (``--open-health``, on by default), so a load
balancer's or Kubernetes' gRPC probe reaches them; reflection can be too
(``--open-reflection``, off by default: it describes the whole service to anyone); such a call
without a key holds only a place among a few, for a while (:mod:`omni_grpc.server.stream_cap`).
A refused call is refused at once, before it is served (its first message, if already on its
way, is let land first: see :func:`omni_grpc.server.status.refuse_call`). Which key a call
presented also decides which sessions it may reach (see ``omni_grpc.core.credentials``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence

import grpc
from grpc_health.v1 import health as grpc_health
from grpc_reflection.v1alpha import reflection as grpc_reflection

from omni_grpc.server.status import refuse_call, unauthenticated
from omni_grpc.wire.keys import bearer_key, key_matches

HEALTH_SERVICE = grpc_health.SERVICE_NAME  # grpc.health.v1.Health
REFLECTION_SERVICE = grpc_reflection.SERVICE_NAME  # grpc.reflection.v1alpha.ServerReflection


def open_services(*, health: bool, reflection: bool) -> frozenset[str]:
    """The services served without a key, as chosen by ``--open-health``/``--open-reflection``."""
    return frozenset(
        name
        for name, is_open in ((HEALTH_SERVICE, health), (REFLECTION_SERVICE, reflection))
        if is_open
    )


def _service_of(method: str) -> str:
    """``/package.Service/Method`` -> ``package.Service``."""
    return method.lstrip("/").partition("/")[0]


class ApiKeyInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call that lacks a valid key, except to the ``keyless`` services."""

    def __init__(self, keys: Sequence[str], keyless: Iterable[str] = ()) -> None:
        self._keys = tuple(keys)
        self._keyless = frozenset(keyless)
        status = unauthenticated()

        def refusing(streaming: bool) -> Callable[..., Awaitable[None]]:
            async def refuse(request: object, context: grpc.aio.ServicerContext) -> None:
                code, details, trailing = status.code, status.details, status.trailing_metadata
                await refuse_call(context, code, details, trailing, streaming=streaming)

            return refuse

        # Refused as request streams whatever the method: gRPC would otherwise wait for a
        # unary call's request before refusing it, and a call that never sends one would hold
        # its place in gRPC's own count for ever.
        unary_response = grpc.stream_unary_rpc_method_handler(refusing(False))
        stream_response = grpc.stream_stream_rpc_method_handler(refusing(True))
        self._refusals = {False: unary_response, True: stream_response}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method
        if _service_of(method) in self._keyless or key_matches(
            bearer_key(handler_call_details.invocation_metadata), self._keys
        ):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        return self._refusals[handler.response_streaming]
