"""One websocket ⇄ one ``Converse`` stream: the bridge's only per-connection state.

A connection first works out its handshake: the session opens at once when the URL names a
``model`` (what stock OpenAI clients do), otherwise the first frame decides: ``session.resume``
resumes, ``session.update`` opens with that configuration, anything else opens a default
session and is then applied. After that two tasks run until either ends:

* the **reader** takes frames, translates them, numbers the commands (``client_seq`` is the
  bridge's business, never the JSON client's) and writes them to the gRPC stream;
* the **pump** reads contract events, expands them into Realtime events and sends them.

Bridge refusals (bad JSON, bad base64 …) are answered in-band and the socket stays open. When
the service ends the stream the websocket closes with a code a client can act on: 1000 after a
terminal event, 1008 for a refused handshake, 1012/1013 to come back later. When the client
goes, the gRPC call is cancelled, so the service detaches the session and keeps it resumable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc
import orjson
from aiohttp import WSCloseCode, WSMsgType, web
from google.rpc import error_details_pb2, status_pb2

from bridge import client_events as ce
from bridge.dialect import (
    DialectError,
    ServerDialect,
    decode_client_event,
    error_json,
    is_numbered,
    open_request,
    resume_request,
    to_request,
)
from omni_grpc.wire import pb

if TYPE_CHECKING:
    from omni_grpc.gen.omni.duplex.v1.duplex_pb2_grpc import DuplexServiceAsyncStub

logger = logging.getLogger(__name__)

# Events after which the service ends the stream, and the close reason they give.
_TERMINAL = {
    "session_closed": "session_closed",
    "session_expired": "session_expired",
    "session_replaced": "session_replaced",
    "resync_required": "resync_required",
}
# How a gRPC status that ends the stream closes the websocket.
_CLOSE_CODES = {
    grpc.StatusCode.UNAVAILABLE: WSCloseCode.SERVICE_RESTART,
    grpc.StatusCode.RESOURCE_EXHAUSTED: WSCloseCode.TRY_AGAIN_LATER,
    grpc.StatusCode.INVALID_ARGUMENT: WSCloseCode.POLICY_VIOLATION,
    grpc.StatusCode.NOT_FOUND: WSCloseCode.POLICY_VIOLATION,
    grpc.StatusCode.PERMISSION_DENIED: WSCloseCode.POLICY_VIOLATION,
    grpc.StatusCode.FAILED_PRECONDITION: WSCloseCode.POLICY_VIOLATION,
    grpc.StatusCode.UNAUTHENTICATED: WSCloseCode.POLICY_VIOLATION,
}
_STATUS_CODES = {
    grpc.StatusCode.UNAVAILABLE: "service_unavailable",
    grpc.StatusCode.UNAUTHENTICATED: "invalid_api_key",
    grpc.StatusCode.DEADLINE_EXCEEDED: "timeout",
}
_GRPC_DETAILS_KEY = "grpc-status-details-bin"


def status_error(error: grpc.aio.AioRpcError) -> dict[str, Any]:
    """Renders a status that ended the stream as an error event, with the service's code."""
    code = _STATUS_CODES.get(error.code(), "stream_failed")
    # grpc-stubs types trailing metadata loosely; at run time it is (key, value) pairs.
    trailing: Any = error.trailing_metadata()
    for key, value in trailing or ():
        if key == _GRPC_DETAILS_KEY and isinstance(value, bytes):
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info) and info.metadata.get("code"):
                    code = info.metadata["code"]
    error_type = (
        "invalid_request_error"
        if _CLOSE_CODES.get(error.code()) is WSCloseCode.POLICY_VIOLATION
        else "server_error"
    )
    return error_json(code, error.details() or code, error_type=error_type)


class Connection:
    """Carries one websocket over one Converse stream."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        stub: DuplexServiceAsyncStub,
        *,
        metadata: Sequence[tuple[str, str]],
        model: str,
        autostart: bool,
        config_timeout_s: float,
        max_audio_delta_bytes: int,
    ) -> None:
        self.ws = ws
        self._stub = stub
        self._metadata = tuple(metadata)
        self._model = model
        self._autostart = autostart
        self._config_timeout_s = config_timeout_s
        self._dialect = ServerDialect(max_audio_delta_bytes=max_audio_delta_bytes)
        self._call: grpc.aio.StreamStreamCall[pb.ConverseRequest, pb.ConverseResponse] | None = None
        self._next_seq = 1
        self._ready = asyncio.Event()

    @property
    def session_id(self) -> str:
        """The session this connection carries, once the service has named it."""
        return self._dialect.session_id

    async def run(self) -> None:
        """Serves the websocket until either side ends."""
        handshake = await self._handshake()
        if handshake is None:
            return
        first, pending = handshake
        # None: requests are written with call.write(), not taken from an iterator.
        self._call = call = self._stub.Converse(None, metadata=self._metadata)
        pump = asyncio.create_task(self._pump(call), name="bridge-pump")
        reader = asyncio.create_task(self._read(call, first, pending), name="bridge-reader")
        try:
            await asyncio.wait({pump, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not pump.done():
                if not call.done():
                    # The client went away: cancelling detaches the session, which stays
                    # resumable. (A call that failed instead is left to the pump to report.)
                    call.cancel()
                await asyncio.wait({pump}, timeout=5.0)
            # Otherwise the stream ended and the pump closed the socket: the reader is done.
        finally:
            call.cancel()
            for task in (pump, reader):
                task.cancel()
            for task in (pump, reader):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if not self.ws.closed:
                await self.ws.close()

    async def close(self, code: int, reason: str) -> None:
        """Ends the connection from the bridge's side; the session stays resumable."""
        if self._call is not None:
            self._call.cancel()
        await self.ws.close(code=code, message=reason.encode())

    # -- handshake -----------------------------------------------------------------------

    async def _handshake(self) -> tuple[pb.ConverseRequest, pb.ConverseRequest | None] | None:
        """The first request, and a command to send right after it; None if the socket went."""
        if self._autostart:
            return open_request(model=self._model), None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config_timeout_s
        while True:
            try:
                message = await self.ws.receive(timeout=max(deadline - loop.time(), 0.001))
            except TimeoutError:
                await self._send(error_json("config_timeout", "no first event in time"))
                await self.ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"config_timeout")
                return None
            if message.type is not WSMsgType.TEXT:
                if message.type in (
                    WSMsgType.CLOSE,
                    WSMsgType.CLOSING,
                    WSMsgType.CLOSED,
                    WSMsgType.ERROR,
                ):
                    return None
                await self._send(error_json("bad_event", "send events as text frames"))
                continue
            try:
                event = decode_client_event(message.data)
                if isinstance(event, ce.SessionResume):
                    return resume_request(event), None
                if isinstance(event, ce.SessionUpdate):
                    first = open_request(event.session, model=self._model)
                    first.event_id = event.event_id
                    return first, None
                return open_request(model=self._model), to_request(event)
            except DialectError as error:
                await self._refuse(error)

    # -- client → service ----------------------------------------------------------------

    async def _read(
        self,
        call: grpc.aio.StreamStreamCall[pb.ConverseRequest, Any],
        first: pb.ConverseRequest,
        pending: pb.ConverseRequest | None,
    ) -> None:
        try:
            await call.write(first)
            # Numbering starts after the applied commands the service reports on its answer.
            await self._ready.wait()
            if pending is not None:
                await self._write(call, pending)
            async for message in self.ws:
                if message.type is WSMsgType.TEXT:
                    try:
                        request = to_request(decode_client_event(message.data))
                    except DialectError as error:
                        await self._refuse(error)
                        continue
                    await self._write(call, request)
                elif message.type is WSMsgType.BINARY:
                    await self._send(error_json("bad_event", "send events as text frames"))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, ConnectionError):
            return  # the stream or the socket ended under us; the pump tells the client why

    async def _write(
        self, call: grpc.aio.StreamStreamCall[pb.ConverseRequest, Any], request: pb.ConverseRequest
    ) -> None:
        if is_numbered(request):
            request.client_seq = self._next_seq
            self._next_seq += 1
        await call.write(request)

    # -- service → client ----------------------------------------------------------------

    async def _pump(self, call: grpc.aio.StreamStreamCall[Any, pb.ConverseResponse]) -> None:
        reason = "stream_ended"
        try:
            # read() returns the EOF sentinel, the only non-message, when the stream ended.
            while isinstance(response := await call.read(), pb.ConverseResponse):
                kind = response.WhichOneof("event")
                if kind in ("session_created", "session_resumed"):
                    self._next_seq = response.applied_client_seq + 1
                    self._ready.set()
                reason = _TERMINAL.get(kind or "", reason)
                for event in self._dialect.expand(response):
                    await self._send(event)
        except grpc.aio.AioRpcError as error:
            if error.code() is grpc.StatusCode.CANCELLED:
                return  # we cancelled it: the websocket is gone or closing
            logger.info("session %s: stream ended with %s", self.session_id, error.code().name)
            event = status_error(error)
            await self._send(event)
            code = _CLOSE_CODES.get(error.code(), WSCloseCode.INTERNAL_ERROR)
            await self.ws.close(code=code, message=event["error"]["code"].encode()[:120])
            return
        except ConnectionError:
            return  # the client vanished mid-send
        await self.ws.close(code=WSCloseCode.OK, message=reason.encode())

    async def _send(self, event: dict[str, Any]) -> None:
        await self.ws.send_frame(orjson.dumps(event), WSMsgType.TEXT)

    async def _refuse(self, error: DialectError) -> None:
        await self._send(
            error_json(
                error.code,
                error.message,
                error_type=error.error_type,
                param=error.param,
                event_id=error.event_id,
            )
        )
