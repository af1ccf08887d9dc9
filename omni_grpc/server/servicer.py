"""The gRPC transport: it only reads and writes streams, and hands everything else on.

Each Converse stream has exactly one reader and one writer. The first message names what the
stream is for (open or resume); :class:`~omni_grpc.server.sessions.Sessions` does that and hands
back the stream's send queue. Then the reader takes requests with ``context.read()`` and gives
them to the session host; the writer drains the send queue with ``context.write()``. A client
that reads so little that its send queue fills is cut: the call ends with RESOURCE_EXHAUSTED
(``slow_consumer``) and the session waits, detached, for a resume. Responses
are pre-serialized bytes (the journal keeps exactly what went out, and a replay resends it), so
the method is registered with an identity serializer rather than through the generated servicer
base.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from google.protobuf.message import DecodeError

from omni_grpc.core import ResumeGap, StreamRefused
from omni_grpc.core.errors import CommandError, Status
from omni_grpc.server import metrics
from omni_grpc.server.host import SendQueue, SessionHost
from omni_grpc.server.refusals import RefusalLog
from omni_grpc.server.sessions import ResumeFoundEnded, SessionElsewhere, Sessions
from omni_grpc.server.status import rich_status
from omni_grpc.wire import pb
from omni_grpc.wire.keys import REFUSAL_HEADER, ROUTE_HEADER, bearer_key, resume_token

logger = logging.getLogger(__name__)

SERVICE = "omni.duplex.v1.DuplexService"
EOF = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs
FIRST_MESSAGE_TIMEOUT_S = 10.0
# How a stream ends when its reader falls too far behind (see SendQueue.fall_behind). The
# session is only detached: the client resumes and gets what it missed from the journal.
SLOW_CONSUMER = StreamRefused(
    Status.RESOURCE_EXHAUSTED,
    "slow_consumer",
    "the client read too slowly; resume the session to get the missed events",
    retryable=True,
)
# How long a stream cut for a slow reader waits for its write in flight before it gives up on
# telling the client why (a client that never reads again cannot be told anything).
SLOW_CONSUMER_GRACE_S = 30.0


class DuplexServicer:
    """Serves DuplexService over the sessions of one server."""

    def __init__(self, sessions: Sessions, route: str = "") -> None:
        self.sessions = sessions
        # Sent as initial metadata on every call: the key a proxy routes back to this replica.
        self._route_metadata = ((ROUTE_HEADER, route),) if route else ()
        self.refusals = RefusalLog(sessions.clock)

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
        return pb.GetCapabilitiesResponse(capabilities=self.sessions.registry.capabilities)

    async def get_session(
        self, request: pb.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSessionResponse:
        metadata = tuple(context.invocation_metadata() or ())
        try:
            session = self.sessions.registry.lookup(
                request.session_id, resume_token(metadata), key=bearer_key(metadata)
            )
        except StreamRefused as refusal:
            self.refusals.refused("GetSession", request.session_id, context.peer(), refusal.code)
            await _abort(context, refusal)
            raise  # unreachable: abort raises
        if self._route_metadata:
            await context.send_initial_metadata(self._route_metadata)
        return pb.GetSessionResponse(
            session=session.view(),
            last_seq=session.journal.head,
            applied_client_seq=session.applied_client_seq,
        )

    async def converse(self, request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        first: pb.ConverseRequest | None = None
        try:
            first = await _first_request(context)
            # The key was checked by the interceptor; the session is bound and charged to it.
            key = bearer_key(tuple(context.invocation_metadata() or ()))
            if first.WhichOneof("command") == "open_session":
                host, queue = await self.sessions.open(first.open_session, key)
            else:
                host, queue = await self.sessions.resume(first.resume_session, key)
        except StreamRefused as refusal:
            resume = first.resume_session if first and first.HasField("resume_session") else None
            # The codes are the server's own closed set (docs/protocol.md), never client text.
            metrics.STREAM_REFUSALS.labels("resume" if resume else "stream", refusal.code).inc()
            if resume:
                metrics.RESUMES.labels("refused").inc()
            self.refusals.refused(
                "resume" if resume else "stream",
                resume.session_id if resume else "",
                context.peer(),
                refusal.code,
            )
            owner = refusal.route if isinstance(refusal, SessionElsewhere) else ""
            await _refuse_stream(context, refusal, ((ROUTE_HEADER, owner),) if owner else ())
            return
        except ResumeGap as gap:
            metrics.RESUMES.labels("gap").inc()
            await context.write(gap.payload)  # resync_required; the client must start over
            return
        except ResumeFoundEnded as ended:
            metrics.RESUMES.labels("ended").inc()
            for _, payload in ended.effects.sends:  # the missed ending of a closed session
                await context.write(payload)
            return
        try:
            if self._route_metadata:
                await context.send_initial_metadata(self._route_metadata)
            await _pump_stream(host, queue, context)
        finally:
            self.sessions.release(host, queue)


async def _first_request(context: grpc.aio.ServicerContext) -> pb.ConverseRequest:
    """The stream's first message, which must be an unnumbered open or resume."""
    try:
        raw = await asyncio.wait_for(context.read(), FIRST_MESSAGE_TIMEOUT_S)
    except TimeoutError:
        raise StreamRefused(
            Status.INVALID_ARGUMENT, "config_timeout", "no first message in time"
        ) from None
    if raw is EOF:
        raise StreamRefused(Status.INVALID_ARGUMENT, "bad_event", "the stream ended early")
    first = _parse(raw)
    if first is None:
        raise StreamRefused(
            Status.INVALID_ARGUMENT, "invalid_message", "the first message is not a ConverseRequest"
        )
    if first.client_seq != 0 or first.WhichOneof("command") not in (
        "open_session",
        "resume_session",
    ):
        raise StreamRefused(
            Status.INVALID_ARGUMENT,
            "bad_first_message",
            "the first message must be open_session or resume_session, unnumbered",
        )
    return first


async def _pump_stream(
    host: SessionHost, queue: SendQueue, context: grpc.aio.ServicerContext
) -> None:
    reader = asyncio.create_task(_read(host, queue, context))
    writer = asyncio.create_task(_write(queue, context))
    behind = asyncio.create_task(queue.fell_behind.wait())
    try:
        done, _ = await asyncio.wait({reader, writer, behind}, return_when=asyncio.FIRST_COMPLETED)
        if reader in done and reader.exception() is None and not queue.fell_behind.is_set():
            # The client half-closed: keep writing until the session ends (or it falls behind).
            await asyncio.wait({writer, behind}, return_when=asyncio.FIRST_COMPLETED)
        if queue.fell_behind.is_set():
            # gRPC takes no status while a write is in flight, and that write waits for the
            # client to read again: the writer stops after it (or the grace runs out). A reader
            # writing on the fast path stops by itself once its write is done.
            if not queue.writing:
                reader.cancel()
            await asyncio.wait({writer}, timeout=SLOW_CONSUMER_GRACE_S)
    finally:
        for task in (reader, writer, behind):
            task.cancel()
        for task in (reader, writer, behind):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    if (
        queue.fell_behind.is_set()
        and writer.done()
        and not writer.cancelled()
        and writer.exception() is None
    ):
        # The status goes out behind what the transport already holds: a client that reads
        # again gets those events, then the reason, and resumes for the rest.
        await _abort(context, SLOW_CONSUMER)


async def _read(host: SessionHost, queue: SendQueue, context: grpc.aio.ServicerContext) -> None:
    while True:
        raw = await context.read()
        if raw is EOF:
            return
        request = _parse(raw)
        del raw  # a large append would otherwise be held twice while the host takes it
        if request is None:
            host.refuse(
                queue.generation,
                CommandError("invalid_message", "the message is not a ConverseRequest"),
            )
        else:
            await host.receive(queue.generation, request)
        del request  # not held while waiting for the next message
        # The fast path: what the command made (an echoed chunk, an error) goes out from here,
        # when no write is in flight, without a hop to the writer task.
        while (payload := queue.take_now()) is not None:
            await queue.write_out(context.write, payload)
        if queue.end_reason is not None:
            return


async def _write(queue: SendQueue, context: grpc.aio.ServicerContext) -> None:
    while (payload := await queue.next()) is not None and not queue.fell_behind.is_set():
        await queue.write_out(context.write, payload)
    await queue.written()  # a fast-path write of the reader's ends first (see _pump_stream)


def _parse(raw: object) -> pb.ConverseRequest | None:
    try:
        return pb.ConverseRequest.FromString(raw)  # type: ignore[arg-type]
    except DecodeError:
        return None


async def _refuse_stream(
    context: grpc.aio.ServicerContext,
    refusal: StreamRefused,
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    """Ends a stream before it started, its status in the headers too (see REFUSAL_HEADER)."""
    status = rich_status(refusal)
    details = [
        (REFUSAL_HEADER, value) for key, value in status.trailing_metadata if key.endswith("-bin")
    ]
    await context.send_initial_metadata((*details, *extra))
    await _abort(context, refusal, extra)


async def _abort(
    context: grpc.aio.ServicerContext,
    refusal: StreamRefused,
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    status = rich_status(refusal)
    await context.abort(status.code, status.details, tuple(status.trailing_metadata) + extra)
