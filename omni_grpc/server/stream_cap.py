"""Bounds on what calls hold: streams per server, places per API key and per peer, and calls
without a key.

A stream comes as a ``Converse`` call, as a stream of a ``ConverseMany`` call, or from a bridge
in the same process (:mod:`omni_grpc.server.local`). gRPC's ``maximum_concurrent_rpcs`` counts
calls only, and every call alike: a ``ConverseMany`` call carrying a thousand streams is one call
to it, an in-process stream is none, and a thousand health watches without a key are a thousand.
So it is set well above what keyed work uses (``--max-concurrent-rpcs``), and the bounds that
keep tenants apart are here, in one :class:`StreamCap`:

* **Streams of the server.** Every stream takes a place while it is attached; the one beyond
  ``--max-concurrent-streams`` is refused as gRPC refuses a call beyond its own limit
  (``RESOURCE_EXHAUSTED``, gRPC's own words), wherever it came from.
* **Places of a key and of a peer.** Every stream and every other call in flight takes a place
  of its API key, and every gRPC call one of its peer's address (a ``ConverseMany`` call's
  streams are places of their keys; the call, of its address), so one key, or one address,
  cannot hold every place: past a key's share (the tenant policy's ``streams``,
  :mod:`omni_grpc.wire.tenant_policy`) or ``--max-streams-per-peer`` a call is refused
  ``RESOURCE_EXHAUSTED`` (``resource_exhausted``, retryable).
* **Calls without a key** (health checks and, when opened, reflection) take a place among
  ``--keyless-calls`` instead, and end after ``--keyless-call-s``: a watch without a key is told
  to watch again, so it holds nothing for long.
* **Every call's request comes in time.** A call whose method takes one request is read as a
  stream here, so a call whose request never comes is ended after ``MESSAGE_TIMEOUT_S`` instead
  of holding its place for ever (gRPC itself would wait). A stream's first message has its own
  deadline (``stream.py``), shorter when streams run short (:attr:`StreamCap.short`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import grpc

from omni_grpc.core.errors import Status, StreamRefused
from omni_grpc.server.status import refuse_call, rich_status
from omni_grpc.wire.keys import bearer_key, key_matches

# What gRPC itself answers a call beyond maximum_concurrent_rpcs; said the same way here.
TOO_MANY_STREAMS = "Concurrent RPC limit exceeded!"
CONVERSE = "/omni.duplex.v1.DuplexService/Converse"
CONVERSE_MANY = "/omni.duplex.v1.DuplexService/ConverseMany"  # its streams take their own places
# How long a call may take to send the request of a method that takes one.
MESSAGE_TIMEOUT_S = 10.0
# The share of a cap in use from which places run short (see StreamCap.short).
SHORT_SHARE = 0.75
PLACE_RETRY_AFTER_S = 1.0
# The bounds a call may reach: how its refusal is counted (omni_grpc_key_refusals' reason).
STREAMS, PER_KEY, PER_PEER, KEYLESS = (
    "streams",
    "streams_per_key",
    "streams_per_peer",
    "keyless_calls",
)
TOO_MANY_KEYLESS = "too many calls without an API key at once; retry"
EOF = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs
Behaviour = Callable[..., Any]


def peer_address(peer: str) -> str:
    """The address part of a gRPC peer (``ipv4:10.0.0.7:51234`` -> ``ipv4:10.0.0.7``); an
    address without a port (a forwarded client's, omni_grpc.server.client_address) as it is."""
    kind, _, rest = peer.partition(":")
    has_port = (kind == "ipv4" and rest.count(":") == 1) or (
        kind == "ipv6" and ("]:" in rest or "%5D:" in rest)
    )
    return peer.rpartition(":")[0] if has_port else peer


def share(limit: int) -> int:
    """The default share of one holder: three quarters of ``limit``, rounded up."""
    return limit - limit // 4


class StreamCap:
    """The streams open now against the server's limit, and the places of each key and peer.

    ``per_key`` and ``per_peer`` of 0 leave that bound off. The empty key (a server without
    keys: every client the same tenant) and the empty peer (in-process) are never bounded.
    """

    __slots__ = ("_by_key", "_by_peer", "limit", "open", "per_key", "per_peer", "short")

    def __init__(self, limit: int, *, per_key: int = 0, per_peer: int = 0) -> None:
        self.limit = limit
        self.per_key = per_key
        self.per_peer = per_peer
        self.open = 0
        self._by_key: Counter[str] = Counter()
        self._by_peer: Counter[str] = Counter()
        # Set while a quarter of the streams or less is left: streams that have not spoken yet
        # are then given less time to (servicer.py).
        self.short = asyncio.Event()

    def take(self, key: str = "", peer: str = "", *, stream: bool = True) -> str | None:
        """Takes a place (and a stream, when ``stream``); None when taken, else the bound that
        was reached (``streams``, ``streams_per_key``, ``streams_per_peer``), nothing taken."""
        if stream and self.open >= self.limit:
            return STREAMS
        if key and self.per_key and self._by_key[key] >= self.per_key:
            return PER_KEY
        if peer and self.per_peer and self._by_peer[peer] >= self.per_peer:
            return PER_PEER
        if stream:
            self.open += 1
            if self.open >= share(self.limit):
                self.short.set()
        if key:
            self._by_key[key] += 1
        if peer:
            self._by_peer[peer] += 1
        return None

    def refusal(self, bound: str) -> StreamRefused | None:
        """How a call that reached ``bound`` is refused: ``resource_exhausted``, retryable, or
        None for the server's own bound, refused in gRPC's words (``TOO_MANY_STREAMS``)."""
        if bound == PER_KEY:
            return _refusal(f"this API key holds its share of streams: limit={self.per_key}")
        if bound == PER_PEER:
            return _refusal(f"this address holds its share of streams: limit={self.per_peer}")
        if bound == KEYLESS:
            return _refusal(TOO_MANY_KEYLESS)
        return None

    def give(self, key: str = "", peer: str = "", *, stream: bool = True) -> None:
        """Gives back what ``take`` took."""
        if stream:
            self.open -= 1
            if self.open < share(self.limit):
                self.short.clear()
        for counts, holder in ((self._by_key, key), (self._by_peer, peer)):
            if holder:
                counts[holder] -= 1
                if not counts[holder]:
                    del counts[holder]


def _refusal(message: str) -> StreamRefused:
    return StreamRefused(
        Status.RESOURCE_EXHAUSTED,
        "resource_exhausted",
        message,
        retryable=True,
        retry_after_s=PLACE_RETRY_AFTER_S,
    )


async def refuse_over_cap(
    context: grpc.aio.ServicerContext, refusal: StreamRefused | None, *, streaming: bool
) -> None:
    """Ends a call refused by the cap (None: the server's bound, in gRPC's own words); the
    handler returns right after (see :func:`refuse_call`)."""
    if refusal is None:
        exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
        await refuse_call(context, exhausted, TOO_MANY_STREAMS, streaming=streaming)
        return
    status = rich_status(refusal)
    trailing = status.trailing_metadata
    await refuse_call(context, status.code, status.details, trailing, streaming=streaming)


class CappedCalls(grpc.aio.ServerInterceptor):
    """Makes each call hold its places while it runs (see the module).

    Placed after the key check, so a call without a valid key to a method that needs one is
    refused before it takes a place. ``keys`` are the server's; ``open_services`` the services
    served without a key (their calls without one go to ``keyless``). The cost is per call (one
    wrapper coroutine), nothing per message.
    """

    def __init__(
        self,
        cap: StreamCap,
        keyless: StreamCap,
        *,
        keys: Sequence[str],
        open_services: frozenset[str],
        keyless_call_s: float,
        address: Callable[[grpc.aio.ServicerContext], str] | None = None,
        refused: Callable[[str, str, str], None] = lambda bound, key, peer: None,
    ) -> None:
        # The client address a call counts against (its peer's, or what a trusted proxy
        # says: omni_grpc.server.client_address).
        self._address = address or (lambda context: peer_address(context.peer()))
        self._refused = refused  # told (bound, key, address) of each call refused here
        self._cap = cap
        self._keyless = keyless
        self._keys = tuple(keys)
        self._open = open_services
        self._keyless_call_s = keyless_call_s

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        key = bearer_key(handler_call_details.invocation_metadata)
        if not key_matches(key, self._keys):
            key = ""
        if not key and method.lstrip("/").partition("/")[0] in self._open:
            return self._wrap(handler, self._keyless, "", stream=True, within=self._keyless_call_s)
        if method == CONVERSE_MANY:
            key = ""
        return self._wrap(handler, self._cap, key, stream=method == CONVERSE, within=None)

    def _wrap(
        self,
        handler: grpc.RpcMethodHandler,
        cap: StreamCap,
        key: str,
        *,
        stream: bool,
        within: float | None,
    ) -> grpc.RpcMethodHandler:
        """The handler as a request-streaming one that holds its places (and reads a unary
        method's request itself, in time), ending the call after ``within`` seconds if given."""
        unary = not handler.request_streaming
        streaming = handler.response_streaming
        behaviour = cast(
            Behaviour,
            {
                (False, False): handler.unary_unary,
                (False, True): handler.unary_stream,
                (True, False): handler.stream_unary,
                (True, True): handler.stream_stream,
            }[(handler.request_streaming, streaming)],
        )
        keyless = cap is self._keyless
        told, address = self._refused, self._address

        async def held(request_iterator: object, context: grpc.aio.ServicerContext) -> Any:
            peer = "" if keyless else address(context)
            bound = cap.take(key, peer, stream=stream or keyless)
            if bound is not None:
                bound = KEYLESS if keyless else bound
                told(bound, key, peer or context.peer())
                await refuse_over_cap(context, cap.refusal(bound), streaming=streaming)
                return None
            try:
                if within is None:
                    return await _serve(behaviour, unary, streaming, request_iterator, context)
                try:
                    async with asyncio.timeout(within):
                        return await _serve(behaviour, unary, streaming, request_iterator, context)
                except TimeoutError:
                    return None  # a call without a key has had its time: it may call again
            finally:
                cap.give(key, peer, stream=stream or keyless)

        make = (
            grpc.stream_stream_rpc_method_handler
            if streaming
            else grpc.stream_unary_rpc_method_handler
        )
        return make(
            held,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


async def _serve(
    behaviour: Behaviour,
    unary: bool,
    streaming: bool,
    request_iterator: object,
    context: grpc.aio.ServicerContext,
) -> Any:
    """Runs the method (a unary one on its request, read here in time); the responses of one
    written as an async generator are written here."""
    if unary:
        try:
            request = await asyncio.wait_for(context.read(), MESSAGE_TIMEOUT_S)
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no request in time")
        if request is EOF:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call sent no request")
        result = behaviour(request, context)
    else:
        result = behaviour(request_iterator, context)
    if streaming and inspect.isasyncgen(result):
        async for response in result:
            await context.write(response)
        return None
    return await result if inspect.isawaitable(result) else result


__all__ = [
    "KEYLESS",
    "MESSAGE_TIMEOUT_S",
    "PER_KEY",
    "PER_PEER",
    "STREAMS",
    "TOO_MANY_STREAMS",
    "CappedCalls",
    "StreamCap",
    "peer_address",
    "refuse_over_cap",
    "share",
]
