"""One websocket ⇄ one ``Converse`` stream: the bridge's only per-connection state.

A relay moves through the states of :class:`RelayState`. In ``HANDSHAKE`` it has no stream
yet: the session opens at once when the URL names a ``model`` (what stock OpenAI clients do),
otherwise the first frame decides (``session.resume`` resumes, ``session.update`` opens with
that configuration, anything else opens a default session and is then applied). In
``ATTACHING`` the first request is on the stream and commands wait for its answer, which says
how many commands the service already applied. In ``RELAYING`` two tasks run until either ends:

* the **reader** takes frames, translates them, numbers the commands (``client_seq`` is the
  bridge's business, never the JSON client's) and writes them to the gRPC stream;
* the **pump** reads contract events, expands them into Realtime events and sends them.

Bridge refusals (bad JSON, bad base64 …) are answered in-band and the socket stays open. When
the service ends the stream the websocket closes with a code a client can act on: 1000 after a
terminal event, 1008 for a refused handshake, 1012/1013 to come back later. When the client
goes, the gRPC call is cancelled, so the service detaches the session and keeps it resumable.
A client that stops reading is the same: once one frame has waited ``send_deadline_s`` for room
in the socket, the gRPC call is cancelled and the websocket closes with 1013 ``slow_consumer``
(the close frame waits behind what the socket holds; a client that has not read it within
another ``send_deadline_s`` is dropped). Either way the relay ends ``CLOSED``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Sequence
from typing import Any

import grpc
import orjson
from aiohttp import WSCloseCode, WSMsgType, web
from opentelemetry.trace import Tracer

from bridge.dialects import OPENAI, make_dialect
from bridge.errors import DialectError
from bridge.options import BridgeOptions
from bridge.realtime import client_events as ce
from bridge.realtime.inbound import is_numbered, resume_request
from bridge.realtime.server_events import (
    RATE_LIMIT_CODE,
    error_json,
    random_event_id,
    rate_limits_updated,
    with_retry_hint,
)
from bridge.tracing import RelayTurns
from bridge.transport import InlineStream, ServiceLink, ServiceStream
from omni_grpc.client.channel import StreamBroken
from omni_grpc.wire import pb
from omni_grpc.wire.keys import ROUTE_HEADER

logger = logging.getLogger(__name__)


class RelayState(enum.Enum):
    """Where a relay is in its life."""

    HANDSHAKE = "handshake"  # no stream yet: the URL or the first frame decides what opens
    ATTACHING = "attaching"  # the first request is sent; commands wait for its answer
    RELAYING = "relaying"  # both directions flow, commands numbered from the service's count
    CLOSED = "closed"  # the socket is closed or closing; the session stays with the service


# The moves a relay makes; any state may close.
_MOVES = {
    RelayState.HANDSHAKE: frozenset({RelayState.ATTACHING, RelayState.CLOSED}),
    RelayState.ATTACHING: frozenset({RelayState.RELAYING, RelayState.CLOSED}),
    RelayState.RELAYING: frozenset({RelayState.CLOSED}),
    RelayState.CLOSED: frozenset({RelayState.CLOSED}),
}
# Events after which the service ends the stream, and the close reason they give.
_TERMINAL = {
    "session_closed": "session_closed",
    "session_expired": "session_expired",
    "session_replaced": "session_replaced",
    "resync_required": "resync_required",
}
_ENDED = frozenset(_TERMINAL.values())
_POLICY = WSCloseCode.POLICY_VIOLATION
SLOW_CONSUMER = "slow_consumer"
# How many times a resume sent on to its session's replica is tried (each after the hint).
ELSEWHERE_ATTEMPTS = 40
# Refusals of a resume that say "not here, not now" (the owner is another replica, or the
# session store is away): the relay tries again after the hint instead of ending the session.
_RESUME_RETRIED = frozenset({"session_elsewhere", "session_store_unavailable"})
# A resume's stream that ended without a word from the service (no code) ended in the transport:
# a proxy's 503 for a replica that just died, a reset connection. grpc.aio reports that as
# UNAVAILABLE, or as INTERNAL ("Internal error from Core") when the resume's write raced the end.
# A resume is safe to send again, so the relay tries again, this long apart when no hint came.
_TRANSPORT_ENDS = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL})
TRANSPORT_RETRY_S = 0.25
# Statuses with which the service refuses the configuration a stream opens with.
_CONFIG_REFUSALS = frozenset(
    {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION}
)
# How a gRPC status that ends the stream closes the websocket.
_CLOSE_CODES = {
    grpc.StatusCode.UNAVAILABLE: WSCloseCode.SERVICE_RESTART,
    grpc.StatusCode.RESOURCE_EXHAUSTED: WSCloseCode.TRY_AGAIN_LATER,
    grpc.StatusCode.INVALID_ARGUMENT: _POLICY,
    grpc.StatusCode.NOT_FOUND: _POLICY,
    grpc.StatusCode.PERMISSION_DENIED: _POLICY,
    grpc.StatusCode.FAILED_PRECONDITION: _POLICY,
    grpc.StatusCode.UNAUTHENTICATED: _POLICY,
}
# Statuses the dialect has a name for: a key the service refused is what OpenAI clients know
# as invalid_api_key (the bridge's own key check says the same).
_DIALECT_CODES = {grpc.StatusCode.UNAUTHENTICATED: "invalid_api_key"}
# Codes for statuses that came without one of the service's own (the transport's).
_FALLBACK_CODES = {
    grpc.StatusCode.UNAVAILABLE: "service_unavailable",
    grpc.StatusCode.DEADLINE_EXCEEDED: "timeout",
}


class ClientFellBehind(Exception):
    """A frame waited longer than the send deadline for room in the client's socket."""


def status_error(status: grpc.StatusCode, broken: StreamBroken) -> dict[str, Any]:
    """Renders the status that ended the stream as an error event, with the service's code."""
    code = (
        _DIALECT_CODES.get(status) or broken.code or _FALLBACK_CODES.get(status) or "stream_failed"
    )
    if status is grpc.StatusCode.RESOURCE_EXHAUSTED:
        # OpenAI's clients back off on a rate_limit_error; the hint says for how long.
        retry_after_ms = round(broken.retry_after_s * 1000)
        event = error_json(
            code, with_retry_hint(str(broken), retry_after_ms), error_type="rate_limit_error"
        )
        if retry_after_ms:
            event["error"].update(retryable=True, retry_after_ms=retry_after_ms)
        return event
    policy = _CLOSE_CODES.get(status) is _POLICY
    return error_json(
        code, str(broken), error_type="invalid_request_error" if policy else "server_error"
    )


class Relay:
    """Carries one websocket over one Converse stream."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        service: ServiceLink,
        options: BridgeOptions,
        *,
        metadata: Sequence[tuple[str, str]],
        model: str,
        autostart: bool,
        transport: asyncio.Transport | None = None,
        tracer: Tracer | None = None,
        extensions: bool = False,
        dialect: str = OPENAI,
    ) -> None:
        self.ws = ws
        self._transport = transport  # the client's connection, dropped if it never reads again
        self._send_deadline_s = options.send_deadline_s
        self.state = RelayState.HANDSHAKE
        self._service = service
        self._metadata = tuple(metadata)
        self._model = model
        self._autostart = autostart
        self._config_timeout_s = options.config_timeout_s
        # The connection's dialect (bridge.dialects): its inbound and outbound translation.
        made = make_dialect(
            dialect, max_audio_delta_bytes=options.max_audio_delta_bytes, extensions=extensions
        )
        self._inbound, self._dialect = made.inbound, made.outbound
        self._stream: ServiceStream | None = None
        self._reader: asyncio.Task[None] | None = None  # the client → service task, if running
        self._next_seq = 1
        self._attached = asyncio.Event()  # set when the state moves past ATTACHING
        # After a rate-limit refusal, the loop time the service's retry hint runs out: the
        # reader forwards nothing before, so a flooding client meets TCP's flow control.
        self._hold_input_until = 0.0
        # The close reason of the stream's end: the last terminal event's, if any.
        self._end_reason = "stream_ended"
        # The event id of a session.update that opened the stream with the client's
        # configuration ("" when it had none), until the service has answered it.
        self._opening_update: str | None = None
        # The in-band answer to an opening configuration the service refused (see run()).
        self._config_refused: dict[str, Any] | None = None
        # A resume that reached a replica its session does not live on (several replicas behind
        # a proxy): retried with the owner's routing key, when the refusal named it.
        self._elsewhere: StreamBroken | None = None
        self._resuming = False  # the stream opens with a resume (safe to send again)
        # The span of each turn and its context for the service; None when tracing is off.
        self._turns = RelayTurns(tracer) if tracer is not None else None

    @property
    def session_id(self) -> str:
        """The session this relay carries, once the service has named it."""
        return self._dialect.session_id

    def _move(self, state: RelayState) -> None:
        assert state in _MOVES[self.state], f"a relay does not go from {self.state} to {state}"
        logger.debug(
            "session %s: relay %s -> %s",
            self.session_id,
            self.state.value,
            state.value,
            # No field before the service has named the session.
            extra={"session_id": self.session_id} if self.session_id else None,
        )
        self.state = state
        if state is not RelayState.ATTACHING:
            self._attached.set()

    async def run(self) -> None:
        """Serves the websocket until either side ends."""
        try:
            handshake = await self._handshake()
            if handshake is None or self.state is RelayState.CLOSED:
                return
            first, pending = handshake
            self._resuming = first.HasField("resume_session")
            self._stream = stream = self._service.converse(self._metadata)
            self._move(RelayState.ATTACHING)
            await self._relay(stream, first, pending)
            for _ in range(ELSEWHERE_ATTEMPTS):
                if self._elsewhere is None or self.state is not RelayState.ATTACHING:
                    break
                await asyncio.sleep(self._elsewhere.retry_after_s or TRANSPORT_RETRY_S)
                route = ((ROUTE_HEADER, self._elsewhere.route),) if self._elsewhere.route else ()
                self._elsewhere = None
                self._stream = stream = self._service.converse(self._metadata + route)
                await self._relay(stream, first, pending)
            if (refused := self._elsewhere) is not None and self.state is RelayState.ATTACHING:
                # Refused "not here, not now" on every try: the client hears the last refusal
                # and its status's close code instead of a bare close.
                assert refused.status is not None
                await self._end_refused(refused.status, refused)
            if self._config_refused is not None and self.state is RelayState.ATTACHING:
                # The opening session.update asked for a configuration the service refused: like
                # any refused update, it is answered in band and the session goes on, here with
                # the defaults it would have had before the update.
                await self._send(self._config_refused)
                self._stream = stream = self._service.converse(self._metadata)
                await self._relay(stream, self._inbound.open_request(None, model=self._model), None)
        except ClientFellBehind:
            await self._close_behind()
        finally:
            self._move(RelayState.CLOSED)
            if self._turns is not None:
                self._turns.close()
            if self._stream is not None:
                self._stream.cancel()
            if not self.ws.closed:
                await self._close_ws(WSCloseCode.OK, "")

    async def close(self, code: int, reason: str) -> None:
        """Ends the relay from the bridge's side; the session stays resumable."""
        self._move(RelayState.CLOSED)
        if self._stream is not None:
            self._stream.cancel()
        await self._close_ws(code, reason)

    async def _close_behind(self) -> None:
        """Ends the relay of a client that stopped reading: 1013 ``slow_consumer``."""
        logger.info(
            "session %s: the client stopped reading; closing",
            self.session_id,
            extra={"session_id": self.session_id},
        )
        self._move(RelayState.CLOSED)
        if self._stream is not None:
            self._stream.cancel()  # the service detaches the session, which stays resumable
        await self._close_ws(WSCloseCode.TRY_AGAIN_LATER, SLOW_CONSUMER)

    async def _close_ws(self, code: int, reason: str) -> None:
        """Closes the websocket, dropping the connection if the close frame cannot go out."""
        reader = self._reader
        if reader is not None and reader is not asyncio.current_task() and not reader.done():
            # aiohttp drops the connection right after the close frame when another task waits
            # in receive(), and a client that had not read the frame yet sees 1006: the reader
            # stops first, so the close waits for the client's answer (the closing handshake).
            reader.cancel()
            await asyncio.wait({reader})
        try:
            async with asyncio.timeout(self._send_deadline_s):
                await self.ws.close(code=code, message=reason.encode()[:120])
        except TimeoutError:
            # The close frame still waits behind unread frames: a client that does not read
            # cannot be told anything, and its connection would otherwise stay forever.
            if self._transport is not None:
                self._transport.abort()

    async def _relay(
        self, stream: ServiceStream, first: pb.ConverseRequest, pending: pb.ConverseRequest | None
    ) -> None:
        pump = asyncio.create_task(self._pump(stream), name="bridge-pump")
        reader = asyncio.create_task(self._read(stream, first, pending), name="bridge-reader")
        self._reader = reader
        try:
            await asyncio.wait({pump, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not pump.done():
                # The client went away (or the stream failed, which the pump reports): cancelling
                # detaches the session, which stays resumable.
                stream.cancel()
                await asyncio.wait({pump}, timeout=5.0)
            # Otherwise the stream ended and the pump closed the socket: the reader is done.
        finally:
            for task in (pump, reader):
                task.cancel()
            outcomes = await asyncio.gather(pump, reader, return_exceptions=True)
        errors = [outcome for outcome in outcomes if isinstance(outcome, Exception)]
        behind = [error for error in errors if isinstance(error, ClientFellBehind)]
        if errors:
            raise (behind or errors)[0]

    # -- handshake -----------------------------------------------------------------------

    async def _handshake(self) -> tuple[pb.ConverseRequest, pb.ConverseRequest | None] | None:
        """The first request, and a command to send right after it; None if the socket went."""
        if self._autostart:
            return self._inbound.open_request(None, model=self._model), None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config_timeout_s
        while True:
            try:
                message = await self.ws.receive(timeout=max(deadline - loop.time(), 0.001))
            except TimeoutError:
                await self._send(error_json("config_timeout", "no first event in time"))
                await self._close_ws(_POLICY, "config_timeout")
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
                event = self._inbound.decode(message.data)
                if isinstance(event, ce.SessionResume):
                    # Only a client of the duplex protocol resumes: it gets its extensions.
                    self._dialect.extensions = True
                    return resume_request(event), None
                if isinstance(event, ce.SessionUpdate):
                    first = self._inbound.open_request(event, model=self._model)
                    first.event_id = event.event_id
                    self._opening_update = event.event_id or ""
                    return first, None
                first = self._inbound.open_request(None, model=self._model)
                return first, self._inbound.to_request(event)
            except DialectError as error:
                await self._refuse(error)
                if self._inbound.ends_handshake(error):
                    # The vLLM-Omni dialect's handshake ends on a first frame it cannot read.
                    await self._close_ws(WSCloseCode.OK, error.code)
                    return None

    # -- client → service ----------------------------------------------------------------

    async def _read(
        self, stream: ServiceStream, first: pb.ConverseRequest, pending: pb.ConverseRequest | None
    ) -> None:
        try:
            await stream.write(first)
            # Numbering starts after the applied commands the service reports on its answer.
            await self._attached.wait()
            if self.state is not RelayState.RELAYING:
                return
            if pending is not None:
                await self._write(stream, pending)
            inline = stream if isinstance(stream, InlineStream) else None
            closing = False
            async for message in self.ws:
                if closing or self._end_reason in _ENDED:
                    # The client closed the session, or it ended, and the service ends the
                    # stream next: a command now could not be applied, and writing one races
                    # the stream's end. The websocket closes when the stream does.
                    continue
                if message.type is WSMsgType.TEXT:
                    try:
                        request = self._inbound.request(message.data)
                    except DialectError as error:
                        await self._refuse(error)
                        continue
                    await self._write(stream, request)
                    closing = request.HasField("close_session")
                    # What the command made at once (an echoed chunk) goes out from here: the
                    # pump is not woken for it (bridge.transport.InlineStream).
                    while inline is not None and (payload := inline.take_now()) is not None:
                        await inline.write_out(self._deliver_serialized, payload)
                elif message.type is WSMsgType.BINARY:
                    await self._send(error_json("bad_event", "send events as text frames"))
        except (StreamBroken, ConnectionError):
            return  # the stream or the socket ended under us; the pump tells the client why

    async def _write(self, stream: ServiceStream, request: pb.ConverseRequest) -> None:
        hold_s = self._hold_input_until - asyncio.get_running_loop().time()
        if hold_s > 0:
            await asyncio.sleep(hold_s)
        if is_numbered(request):
            request.client_seq = self._next_seq
            self._next_seq += 1
        if self._turns is not None:
            self._turns.sending(request)
        await stream.write(request)

    # -- service → client ----------------------------------------------------------------

    async def _deliver(self, response: pb.ConverseResponse) -> None:
        """Acts on one contract event and sends its Realtime events."""
        kind = response.WhichOneof("event")
        if self._turns is not None:
            self._turns.received(kind, response)
        if kind in ("session_created", "session_resumed"):
            self._next_seq = response.applied_client_seq + 1
            if self.state is RelayState.ATTACHING:
                self._move(RelayState.RELAYING)
        self._end_reason = _TERMINAL.get(kind or "", self._end_reason)
        if kind == "error" and response.error.code == RATE_LIMIT_CODE:
            hint_s = response.error.retry_after.ToMilliseconds() / 1000
            self._hold_input_until = asyncio.get_running_loop().time() + hint_s
        for event in self._dialect.expand(response):
            await self._send(event)

    async def _deliver_serialized(self, payload: bytes) -> None:
        await self._deliver(pb.ConverseResponse.FromString(payload))

    async def _pump(self, stream: ServiceStream) -> None:
        self._end_reason = "stream_ended"
        try:
            if isinstance(stream, InlineStream):
                # Its events go out one at a time, in the order taken, with the reader's.
                while (payload := await stream.read_serialized()) is not None:
                    await stream.write_out(self._deliver_serialized, payload)
            else:
                while (response := await stream.read()) is not None:
                    await self._deliver(response)
        except StreamBroken as broken:
            status = broken.status
            if status is None or status is grpc.StatusCode.CANCELLED:
                return  # we cancelled it: the websocket is gone or closing
            if self._end_reason in _ENDED:
                # The session's end was delivered; the stream ending badly after it is a write
                # that raced that end (gRPC then reports the call as INTERNAL, not as it ended).
                await self._close_ws(WSCloseCode.OK, self._end_reason)
                return
            if self.state is RelayState.ATTACHING and self._tries_again(broken):
                self._elsewhere = broken  # run() resumes again, towards the owner if named
                return
            if (
                self.state is RelayState.ATTACHING
                and self._opening_update is not None
                and status in _CONFIG_REFUSALS
            ):
                # The service refused the configuration the client opened with; run() answers
                # it in band and opens with the defaults.
                refusal = status_error(status, broken)
                refusal["error"]["event_id"] = self._opening_update or None
                self._config_refused, self._opening_update = refusal, None
                return
            await self._end_refused(status, broken)
            return
        except ConnectionError:
            return  # the client vanished mid-send
        await self._close_ws(WSCloseCode.OK, self._end_reason)

    def _tries_again(self, broken: StreamBroken) -> bool:
        """Whether the attaching stream's end says "not here, not now": a resume refused for
        now, or one lost in the transport. A new session is never opened twice."""
        if broken.code in _RESUME_RETRIED:
            return True
        return self._resuming and not broken.code and broken.status in _TRANSPORT_ENDS

    async def _end_refused(self, status: grpc.StatusCode, broken: StreamBroken) -> None:
        """Tells the client why the service ended (or refused) its stream, and closes."""
        logger.info(
            "session %s: stream ended with %s",
            self.session_id,
            status.name,
            extra={"session_id": self.session_id},
        )
        event = status_error(status, broken)
        ending = [event]
        if retry_after_ms := event["error"].get("retry_after_ms", 0):
            limits = rate_limits_updated("requests", retry_after_ms)
            ending.append({**limits, "event_id": random_event_id()})
        for each in self._dialect.shown(ending):
            await self._send(each)
        code = _CLOSE_CODES.get(status, WSCloseCode.INTERNAL_ERROR)
        await self._close_ws(code, event["error"]["code"])

    async def _send(self, event: dict[str, Any]) -> None:
        frame = orjson.dumps(event)
        transport = self._transport
        if (
            transport is not None
            and transport.get_write_buffer_size() == 0
            and len(frame) < transport.get_write_buffer_limits()[1] // 2
        ):
            # Nothing waits in the socket and the frame fits far below its high-water mark, so
            # the write cannot pause the connection and send_frame returns without waiting: no
            # deadline to arm (arming one costs more than the rest of a small frame's send).
            await self.ws.send_frame(frame, WSMsgType.TEXT)
            return
        try:
            async with asyncio.timeout(self._send_deadline_s):
                # The frame is in the socket's buffer at once; the wait is for it to drain.
                await self.ws.send_frame(frame, WSMsgType.TEXT)
        except TimeoutError:
            raise ClientFellBehind from None

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
