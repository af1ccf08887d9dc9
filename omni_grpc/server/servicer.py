"""The gRPC transport: it only reads, writes and hands things to the session host.

Each Converse stream has exactly one reader and one writer. The reader takes requests with
``context.read()`` and feeds them to the core through the host; the writer drains the stream's
outbox with ``context.write()``. Responses are pre-serialized bytes (the journal keeps exactly
what went out, and a replay resends it), so the method is registered with an identity
serializer rather than through the generated servicer base.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import grpc
from google.protobuf.message import DecodeError

from omni_grpc.core import Effects, Registry, ResumeGap, Session, StreamRefused
from omni_grpc.core.errors import CommandError, Status
from omni_grpc.engine.base import Engine
from omni_grpc.server.host import Outbox, SessionHost
from omni_grpc.server.status import rich_status
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

SERVICE = "omni.duplex.v1.DuplexService"
EOF = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs
FIRST_MESSAGE_TIMEOUT_S = 10.0


class DuplexServicer:
    """Serves DuplexService over one registry and one engine."""

    def __init__(
        self, registry: Registry, engine: Engine, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.registry = registry
        self.engine = engine
        self.clock = clock
        self.hosts: dict[str, SessionHost] = {}
        # Set whenever a stream lets go of its session, so a drain can wait for the last one.
        self.stream_released = asyncio.Event()

    def handler(self) -> grpc.GenericRpcHandler:
        """The method handlers, with requests parsed by protobuf and responses sent as bytes."""
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Converse": grpc.stream_stream_rpc_method_handler(
                    # Requests arrive as bytes and are parsed here, so a malformed one is answered
                    # with a typed error instead of failing the whole stream inside grpc.
                    self.converse,
                    request_deserializer=None,
                    response_serializer=None,
                ),
                "GetCapabilities": grpc.unary_unary_rpc_method_handler(
                    self.get_capabilities,
                    request_deserializer=pb.GetCapabilitiesRequest.FromString,
                    response_serializer=pb.GetCapabilitiesResponse.SerializeToString,
                ),
                "GetSession": grpc.unary_unary_rpc_method_handler(
                    self.get_session,
                    request_deserializer=pb.GetSessionRequest.FromString,
                    response_serializer=pb.GetSessionResponse.SerializeToString,
                ),
            },
        )

    async def get_capabilities(
        self, request: pb.GetCapabilitiesRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCapabilitiesResponse:
        return pb.GetCapabilitiesResponse(capabilities=self.registry.capabilities)

    async def get_session(
        self, request: pb.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSessionResponse:
        try:
            session = self.registry.lookup(request.session_id, request.resume_token)
        except StreamRefused as refusal:
            await _abort(context, refusal)
            raise  # unreachable: abort raises
        return pb.GetSessionResponse(
            session=session.view(),
            last_seq=session.journal.head,
            applied_client_seq=session.applied_client_seq,
        )

    async def converse(self, request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        try:
            host, outbox = await self._handshake(context)
        except StreamRefused as refusal:
            logger.info("stream refused: %s", refusal.code)
            await _abort(context, refusal)
            return
        except ResumeGap as gap:
            await context.write(gap.payload)  # resync_required; the client must start over
            return
        except SessionEnded as ended:
            for _, payload in ended.effects.sends:  # the missed ending of a closed session
                await context.write(payload)
            return
        try:
            await self._pump_stream(host, outbox, context)
        finally:
            host.release(outbox)
            self.stream_released.set()

    async def _handshake(self, context: grpc.aio.ServicerContext) -> tuple[SessionHost, Outbox]:
        try:
            first = await asyncio.wait_for(context.read(), FIRST_MESSAGE_TIMEOUT_S)
        except TimeoutError:
            raise StreamRefused(
                Status.INVALID_ARGUMENT, "config_timeout", "no first message in time"
            ) from None
        if first is EOF:
            raise StreamRefused(Status.INVALID_ARGUMENT, "bad_event", "the stream ended early")
        first = _parse(first)
        if first is None:
            raise StreamRefused(
                Status.INVALID_ARGUMENT,
                "invalid_message",
                "the first message is not a ConverseRequest",
            )
        kind = first.WhichOneof("command")
        if first.client_seq != 0 or kind not in ("open_session", "resume_session"):
            raise StreamRefused(
                Status.INVALID_ARGUMENT,
                "bad_first_message",
                "the first message must be open_session or resume_session, unnumbered",
            )
        now = self.clock()
        if kind == "open_session":
            session, effects = self.registry.open(first.open_session, now)
            try:
                engine_session = await self.engine.open_session(session.id, session.config)
            except Exception:
                logger.exception("session %s: the engine could not open it", session.id)
                self.registry.discard(session)
                raise StreamRefused(
                    Status.UNAVAILABLE,
                    "engine_error",
                    "the engine could not open a session",
                    retryable=True,
                    retry_after_s=1.0,
                ) from None
            host = SessionHost(session, engine_session, self._ended, self.clock)
            self.hosts[session.id] = host
            outbox = host.attach(1)
            logger.info("session %s opened", session.id)
        else:
            session, generation, effects = self.registry.resume(first.resume_session, now)
            if session.state.terminal:
                raise SessionEnded(effects)
            host = self.hosts[session.id]
            outbox = host.attach(generation)
            logger.info("session %s resumed (generation %d)", session.id, generation)
        host.deliver(effects)
        return host, outbox

    async def _pump_stream(
        self, host: SessionHost, outbox: Outbox, context: grpc.aio.ServicerContext
    ) -> None:
        reader = asyncio.create_task(self._read(host, outbox, context))
        writer = asyncio.create_task(self._write(outbox, context))
        try:
            done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            if reader in done and reader.exception() is None:
                await writer  # the client half-closed: keep writing until the session ends
        finally:
            for task in (reader, writer):
                task.cancel()
            for task in (reader, writer):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _read(
        self, host: SessionHost, outbox: Outbox, context: grpc.aio.ServicerContext
    ) -> None:
        while True:
            raw = await context.read()
            if raw is EOF:
                return
            request = _parse(raw)
            if request is None:
                host.deliver(
                    host.session.refuse(
                        outbox.generation,
                        CommandError("invalid_message", "the message is not a ConverseRequest"),
                        host.now(),
                    )
                )
            else:
                await host.receive(outbox.generation, request)
            if outbox.end_reason is not None:
                return

    async def _write(self, outbox: Outbox, context: grpc.aio.ServicerContext) -> None:
        while True:
            item = await outbox.queue.get()
            if isinstance(item, tuple):
                return  # ("end", reason): everything before it was written
            else:
                await context.write(item)

    def _ended(self, session: Session) -> None:
        self.registry.discard(session)
        self.hosts.pop(session.id, None)


class SessionEnded(Exception):
    """A resume found its session ended; ``effects`` replay what the client missed."""

    def __init__(self, effects: Effects) -> None:
        super().__init__("the session has ended")
        self.effects = effects


def _parse(raw: object) -> pb.ConverseRequest | None:
    try:
        return pb.ConverseRequest.FromString(raw)  # type: ignore[arg-type]
    except DecodeError:
        return None


async def _abort(context: grpc.aio.ServicerContext, refusal: StreamRefused) -> None:
    status = rich_status(refusal)
    await context.abort(status.code, status.details, status.trailing_metadata)
