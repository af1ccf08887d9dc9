"""One client connection ⇄ one ``Converse`` stream: the bridge's only per-connection state.

The connection is a :class:`bridge.carrier.Carrier`: a websocket, or a WebRTC call's data
channel and tracks; the relay sees only its events.

A relay moves through the states of :class:`RelayState`. In ``HANDSHAKE`` it has no stream
yet: the session opens at once when the URL names a ``model`` (what stock OpenAI clients do),
otherwise the first frame decides (``session.resume`` resumes, ``session.update`` opens with
that configuration, anything else opens a default session and is then applied). In
``ATTACHING`` the first request is on the stream and commands wait for its answer, which says
how many commands the service already applied. In ``RELAYING`` two tasks run until either ends:

* the **reader** takes frames, has its dialect translate them, numbers the commands
  (``client_seq`` is the bridge's business, never the JSON client's) and writes them to the
  gRPC stream;
* the **pump** reads contract events, has its dialect expand them into JSON events and sends
  them.

The relay names no dialect: it sees its connection's as a :class:`bridge.dialect.Dialect`.
Bridge refusals (bad JSON, bad base64 …) are answered in-band and the socket stays open. When
the service ends the stream the websocket closes with a code a client can act on
(:mod:`bridge.stream_ends`): 1000 after a terminal event, 1008 for a refused handshake,
1012/1013 to come back later. When the client
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
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import grpc
from aiohttp import WSCloseCode, WSMsgType
from opentelemetry.trace import Tracer

from bridge.carrier import Carrier
from bridge.client_socket import ClientFellBehind
from bridge.dialect import Dialect
from bridge.errors import RATE_LIMIT_CODE, DialectError, Refusal, event_too_large
from bridge.frame_meter import FrameMeter
from bridge.loop_shares import KeyShare
from bridge.options import MAX_EVENT_BYTES, BridgeOptions
from bridge.rejoin import HEARTBEAT, REJOIN_ATTEMPTS, Rejoin
from bridge.stream_ends import (
    TRANSPORT_RETRY_S,
    close_code,
    lost_in_transport,
    refuses_config,
    status_refusal,
    tried_again,
)
from bridge.tracing import RelayTurns
from bridge.transport import InlineStream, ServiceLink, ServiceStream
from omni_grpc.client.bookkeeping import CommandJournalFull
from omni_grpc.wire import pb
from omni_grpc.wire.keys import ROUTE_HEADER
from omni_grpc.wire.kinds import UNNUMBERED_COMMANDS
from omni_grpc.wire.stream_end import StreamBroken

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
    # Back to ATTACHING: the replica went, and the relay takes the session back (bridge.rejoin).
    RelayState.RELAYING: frozenset({RelayState.ATTACHING, RelayState.CLOSED}),
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
SLOW_CONSUMER = "slow_consumer"
# How many times a resume sent on to its session's replica is tried (each after the hint).
ELSEWHERE_ATTEMPTS = 40


# The refusal of a socket a resume secret opened whose first event is not its session's resume.
RESUME_SECRET_SCOPE = Refusal(
    "invalid_api_key",
    "a resume secret resumes its own session only (session.resume with its session_id)",
    "invalid_request_error",
)


# The events that carry a resume secret to a page a secret admitted (the wait's too: a page
# that drops while it waits for a place resumes the wait).
_SECRET_KINDS = frozenset({"session_created", "session_resumed", "session_queued"})
_SECRET_EVENTS = frozenset({"session.created", "session.resumed", "session.queued"})


def _named(event: dict[str, Any]) -> str:
    """The session id a session.created, session.resumed or session.queued event names."""
    return str(event.get("session_id") or event.get("session", {}).get("id") or "")


def _resumes(request: pb.ConverseRequest, session_id: str) -> bool:
    """Whether ``request`` is the resume of ``session_id``."""
    return request.HasField("resume_session") and request.resume_session.session_id == session_id


def _lay_over(config: pb.SessionConfig, minted: pb.SessionConfig) -> None:
    """Sets in ``config`` each field ``minted`` sets, whole (the model from the URL stays
    when the minted configuration names none)."""
    for field, value in minted.ListFields():
        if field.is_repeated:
            del getattr(config, field.name)[:]
            getattr(config, field.name).extend(value)
        elif field.message_type is not None:
            getattr(config, field.name).CopyFrom(value)
        else:
            setattr(config, field.name, value)


def is_numbered(request: pb.ConverseRequest) -> bool:
    """Says whether the request needs a ``client_seq`` (heartbeats and acks do not)."""
    return request.WhichOneof("command") not in UNNUMBERED_COMMANDS


class Relay:
    """Carries one websocket over one Converse stream."""

    def __init__(
        self,
        carrier: Carrier,
        service: ServiceLink,
        options: BridgeOptions,
        *,
        metadata: Sequence[tuple[str, str]],
        model: str,
        autostart: bool,
        dialect: Dialect,
        tracer: Tracer | None = None,
        meter: FrameMeter | None = None,
        share: KeyShare | None = None,
        resume_secret: Callable[[str], str] | None = None,
        only_session: str = "",
        minted: pb.SessionConfig | None = None,
    ) -> None:
        # The client's connection: a websocket or a WebRTC call (bridge.carrier). Every event
        # goes out through it, within the send deadline.
        self._carrier = carrier
        # A socket a secret opened: each session.created and session.resumed carries a resume
        # secret for its session (bridge.resume_secrets); one a resume secret opened may only
        # resume ``only_session``.
        self._resume_secret = resume_secret
        self._only_session = only_session
        # The configuration the client secret that opened the socket was minted with: the
        # session opens with it (laid over the dialect's defaults).
        self._minted = minted
        # The key's share of a loop pass, which each command's handing on is charged to.
        self._share = share
        # The socket's frames are charged from their headers until their commands leave
        # (bridge.frame_budget): ``_handed_on`` gives back each message's charge, once.
        self._meter = meter
        self._unhanded = False
        self._send = carrier.send
        self.state = RelayState.HANDSHAKE
        self._service = service
        self._metadata = tuple(metadata)
        self._model = model
        self._autostart = autostart
        self._config_timeout_s = options.config_timeout_s
        self._dialect = dialect  # the connection's translation, both ways (bridge.dialects)
        self._stream: ServiceStream | None = None
        self._reader: asyncio.Task[None] | None = None  # the client → service task, if running
        self._next_seq = 1
        # Over a stream to another process, what lets the relay outlive the replica
        # (bridge.rejoin): made when the session is named; None in process, where the bridge
        # goes with the service.
        self._rejoin: Rejoin | None = None
        self._cursor = 0  # the last event the client had when its first frame resumed
        self._rejoining = False  # the stream being attached takes the session back
        self._lost = False  # the stream ended with no word from the service: rejoin
        self._resend: list[pb.ConverseRequest] = []  # what a rejoin sends again first
        # The command on its way to the stream, until numbered: a rejoin sends it if the
        # stream went first (so a frame read is never lost between the socket and the journal).
        self._carry: pb.ConverseRequest | None = None
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
        self._config_refused: Refusal | None = None
        # A resume that reached a replica its session does not live on (several replicas behind
        # a proxy): retried with the owner's routing key, when the refusal named it.
        self._elsewhere: StreamBroken | None = None
        self._resuming = False  # the stream opens with a resume (safe to send again)
        # The span of each turn and its context for the service; None when tracing is off.
        self._turns = RelayTurns(tracer) if tracer is not None else None
        # Set when the service first answers the stream (its session, or its place in the
        # queue), or when the relay ends without an answer: a WebRTC call is answered then.
        self.answered = asyncio.Event()

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
        if state is RelayState.ATTACHING:
            self._attached.clear()
        else:
            self._attached.set()

    async def run(self) -> None:
        """Serves the websocket until either side ends."""
        try:
            handshake = await self._handshake()
            if handshake is None or self.state is RelayState.CLOSED:
                return
            first, pending = handshake
            self._cursor = first.resume_session.last_received_seq
            self._move(RelayState.ATTACHING)
            await self._attach(first, pending, ELSEWHERE_ATTEMPTS)
            while self._lost and self.state is RelayState.RELAYING and self._rejoin is not None:
                # The replica went under a live session: take it back on a new stream.
                logger.info(
                    "session %s: the stream was lost; resuming after event %d",
                    self.session_id,
                    self._rejoin.last_seq,
                    extra={"session_id": self.session_id},
                )
                self._lost, self._rejoining = False, True
                self._move(RelayState.ATTACHING)
                await self._attach(self._rejoin.resume(self.session_id), None, REJOIN_ATTEMPTS)
        except ClientFellBehind:
            await self._close_behind()
        finally:
            self._move(RelayState.CLOSED)
            self.answered.set()
            if self._meter is not None:
                self._meter.close()
            if self._turns is not None:
                self._turns.close()
            if self._stream is not None:
                self._stream.cancel()
            if not self._carrier.closed:
                await self._close_ws(WSCloseCode.OK, "")

    async def _attach(
        self, first: pb.ConverseRequest, pending: pb.ConverseRequest | None, attempts: int
    ) -> None:
        """Opens or resumes the session with ``first`` and relays until the stream ends; a
        resume refused "not here, not now" is tried again ``attempts`` times."""
        self._resuming = first.HasField("resume_session")
        self._stream = stream = self._service.converse(self._metadata)
        await self._relay(stream, first, pending)
        for _ in range(attempts):
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
            await self._tell(self._config_refused)
            self._stream = stream = self._service.converse(self._metadata)
            await self._relay(stream, self._dialect.open_request(model=self._model), None)

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
        """Closes the websocket (the reader stopped first)."""
        reader = self._reader
        if reader is not None and reader is not asyncio.current_task() and not reader.done():
            # aiohttp drops the connection right after the close frame when another task waits
            # in receive(), and a client that had not read the frame yet sees 1006: the reader
            # stops first, so the close waits for the client's answer (the closing handshake).
            reader.cancel()
            await asyncio.wait({reader})
        await self._carrier.close(code, reason)

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
            request = self._dialect.open_request(model=self._model)
            if self._minted is not None:
                _lay_over(request.open_session.config, self._minted)
                # Refused by the service, it is answered in band and the session opens with the
                # defaults, as a refused opening session.update is.
                self._opening_update = ""
            return request, None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config_timeout_s
        while True:
            try:
                async with asyncio.timeout(max(deadline - loop.time(), 0.001)):
                    message = await self._carrier.receive()
            except TimeoutError:
                await self._tell(Refusal("config_timeout", "no first event in time"))
                await self._close_ws(WSCloseCode.POLICY_VIOLATION, "config_timeout")
                return None
            if isinstance(message, pb.ConverseRequest):
                # Audio a call's track brought before any session was named: no session could
                # take it, as none can take a websocket's append before its first event.
                continue
            self._received(message.type)
            if message.type is not WSMsgType.TEXT:
                self._handed_on()
                if message.type in (
                    WSMsgType.CLOSE,
                    WSMsgType.CLOSING,
                    WSMsgType.CLOSED,
                    WSMsgType.ERROR,
                ):
                    return None
                await self._tell(Refusal("bad_event", "send events as text frames"))
                continue
            try:
                if not message.data:  # how a frame dropped for its size comes (no text is "")
                    self._refuse_dropped()
                opening = self._dialect.opening(message.data, model=self._model)
            except DialectError as error:
                self._handed_on()
                await self._tell(error.refusal())
                if self._dialect.ends_handshake(error):
                    # The vLLM-Omni dialect's handshake ends on a first frame it cannot read.
                    await self._close_ws(WSCloseCode.OK, error.code)
                    return None
                continue
            self._handed_on()  # what the frame became is small: the first request
            if self._only_session and not _resumes(opening.request, self._only_session):
                await self._tell(RESUME_SECRET_SCOPE)
                await self._close_ws(WSCloseCode.POLICY_VIOLATION, RESUME_SECRET_SCOPE.code)
                return None
            self._opening_update = opening.update_id
            return opening.request, opening.then

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
            if self._rejoining:
                # Exactly what the service has not applied, in order; then a heartbeat, which
                # speaks on the stream (the rotated token arrived) even with nothing to resend.
                self._rejoining = False
                resend, self._resend = self._resend, []
                for request in resend:
                    await stream.write(request)
                await stream.write(HEARTBEAT)
            if self._carry is not None:
                await self._write(stream, self._carry)
            if pending is not None:
                await self._write(stream, pending)
            inline = stream if isinstance(stream, InlineStream) else None
            closing = False
            while True:
                # Held after a refusal for rate: the next frame is not even read meanwhile, so
                # a flooding client meets TCP's flow control (and its frames cost nothing here).
                if self._hold_input_until:  # 0 unless a rate limit refused a command before
                    await self._hold()
                message = await self._carrier.receive()
                if isinstance(message, pb.ConverseRequest):
                    # A command the carrier made itself (a call's audio): numbered and sent as
                    # the dialect's own are, unless the session is ending.
                    if not closing and self._end_reason not in _ENDED:
                        await self._write(stream, message)
                    continue
                if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
                    break
                self._received(message.type)
                share = self._share
                if share is not None:
                    await share.turn()  # the key's other sockets had this pass: wait
                started = time.perf_counter()  # not the loop's clock: uvloop's counts whole ms
                try:
                    if closing or self._end_reason in _ENDED:
                        # The client closed the session, or it ended, and the service ends the
                        # stream next: a command now could not be applied, and writing one races
                        # the stream's end. The websocket closes when the stream does.
                        continue
                    if message.type is WSMsgType.TEXT:
                        try:
                            if not message.data:  # a frame dropped for its size, perhaps
                                self._refuse_dropped()
                            request = self._dialect.request(message.data)
                        except DialectError as error:
                            self._handed_on()
                            await self._tell(error.refusal())
                            continue
                        del message  # its bytes are not held while the command leaves
                        closing = request.HasField("close_session")
                        await self._write(stream, request, inline)
                        del request
                        # What the command made at once (an echoed chunk) goes out from here:
                        # the pump is not woken for it (bridge.transport.InlineStream).
                        if inline is not None:
                            await inline.flush(self._deliver_serialized)
                    elif message.type is WSMsgType.BINARY:
                        self._handed_on()
                        await self._tell(Refusal("bad_event", "send events as text frames"))
                finally:
                    if self._unhanded:  # (the usual command was handed on in ``_write``)
                        self._handed_on()
                    if share is not None:
                        share.spent(time.perf_counter() - started)
        except (StreamBroken, ConnectionError):
            return  # the stream or the socket ended under us; the pump tells the client why

    async def _hold(self) -> None:
        """Waits out the retry hint of the last refusal for rate, if it has not run out."""
        hold_s = self._hold_input_until - asyncio.get_running_loop().time()
        if hold_s > 0:
            await asyncio.sleep(hold_s)

    def _received(self, kind: WSMsgType) -> None:
        """A message came: a text or binary one holds its frames' charge until handed on."""
        self._unhanded = kind in (WSMsgType.TEXT, WSMsgType.BINARY)

    def _refuse_dropped(self) -> None:
        """Raises ``event_too_large`` for a text message the meter dropped unread for its size
        (the relay received an empty frame in its place)."""
        if self._meter is not None and self._meter.dropped():
            raise event_too_large(MAX_EVENT_BYTES)

    def _handed_on(self) -> None:
        """The last message's command has left (or it was answered): its charge goes back."""
        if self._unhanded and self._meter is not None:
            self._meter.handled()
        self._unhanded = False

    async def _write(
        self,
        stream: ServiceStream,
        request: pb.ConverseRequest,
        flushed_by: InlineStream | None = None,
    ) -> None:
        """Numbers ``request`` and writes it; ``flushed_by``: the stream whose ``flush`` the
        caller makes right after (what the command made is held for it)."""
        self._carry = request
        if self._hold_input_until:
            await self._hold()
        probe = False
        if is_numbered(request):
            if self._rejoin is not None:
                try:
                    probe = self._rejoin.number(request)  # kept until applied
                except CommandJournalFull:
                    # Only the service's answer makes room: ask how far it got, and wait.
                    await stream.write(HEARTBEAT)
                    await self._rejoin.room_for(request)
                    probe = self._rejoin.number(request)
            else:
                request.client_seq = self._next_seq
                self._next_seq += 1
        self._carry = None
        if self._turns is not None:
            self._turns.sending(request)
        if flushed_by is not None:
            await flushed_by.write(request, flush_follows=True)
        else:
            await stream.write(request)
        if probe:
            await stream.write(HEARTBEAT)  # its answer says how far the service got
        self._handed_on()  # the service has it: its copies here go

    # -- service → client ----------------------------------------------------------------

    async def _deliver(self, response: pb.ConverseResponse) -> None:
        """Acts on one contract event and sends its JSON events."""
        kind = response.WhichOneof("event")
        if self.state is not RelayState.RELAYING:  # relaying, it was answered already
            self.answered.set()
        if self._turns is not None:
            self._turns.received(kind, response)
        if self._rejoin is not None:
            self._rejoin.delivered(response, kind)
        if kind in ("session_created", "session_resumed"):
            applied = response.applied_client_seq
            self._next_seq = applied + 1
            if self.state is RelayState.ATTACHING:
                if self._rejoining and self._rejoin is not None:
                    self._resend = self._rejoin.unapplied(applied)
                elif self._rejoin is None and not isinstance(self._stream, InlineStream):
                    self._rejoin = Rejoin(applied, self._cursor)
                    self._rejoin.delivered(response, kind)
                self._move(RelayState.RELAYING)
        self._end_reason = _TERMINAL.get(kind or "", self._end_reason)
        if kind == "error" and response.error.code == RATE_LIMIT_CODE:
            hint_s = response.error.retry_after.ToMilliseconds() / 1000
            self._hold_input_until = asyncio.get_running_loop().time() + hint_s
        events = self._dialect.expand(response)
        if self._resume_secret is not None and kind in _SECRET_KINDS:
            for event in events:
                if event.get("type") in _SECRET_EVENTS and (session_id := _named(event)):
                    event["resume_secret"] = self._resume_secret(session_id)
        for event in events:
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
            if lost_in_transport(broken) and self._rejoins():
                self._lost = True  # run() takes the session back on a new stream
                return
            if self._end_reason in _ENDED:
                # The session's end was delivered; the stream ending badly after it is a write
                # that raced that end (gRPC then reports the call as INTERNAL, not as it ended).
                await self._close_ws(WSCloseCode.OK, self._end_reason)
                return
            attaching = self.state is RelayState.ATTACHING
            if attaching and tried_again(broken, resuming=self._resuming):
                self._elsewhere = broken  # run() resumes again, towards the owner if named
                return
            if attaching and self._opening_update is not None and refuses_config(status):
                # The service refused the configuration the client opened with; run() answers
                # it in band and opens with the defaults.
                refusal = replace(status_refusal(status, broken), event_id=self._opening_update)
                self._config_refused, self._opening_update = refusal, None
                return
            await self._end_refused(status, broken)
            return
        except ConnectionError:
            return  # the client vanished mid-send
        if self._rejoins():
            # Ended with no terminal event: the replica stopped or lost the session to a peer
            # (going_away told the client why, if it asked for the extensions).
            self._lost = True
            return
        await self._close_ws(WSCloseCode.OK, self._end_reason)

    def _rejoins(self) -> bool:
        """Whether the stream's end leaves the session to be taken back: a live session,
        relayed from another process, not ending."""
        return (
            self._rejoin is not None
            and self.state is RelayState.RELAYING
            and self._end_reason not in _ENDED
            and not self._carrier.closed
        )

    async def _end_refused(self, status: grpc.StatusCode, broken: StreamBroken) -> None:
        """Tells the client why the service ended (or refused) its stream, and closes."""
        logger.info(
            "session %s: stream ended with %s",
            self.session_id,
            status.name,
            extra={"session_id": self.session_id},
        )
        refusal = status_refusal(status, broken)
        await self._tell(refusal)
        await self._close_ws(close_code(status), refusal.code)

    async def _tell(self, refusal: Refusal) -> None:
        """Tells the client of an error the bridge reports itself, in its dialect."""
        for event in self._dialect.error_events(refusal):
            await self._send(event)
