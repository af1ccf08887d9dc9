"""The gRPC transport: it only reads and writes streams, and hands everything else on.

Each Converse stream has exactly one reader and one writer. A
:class:`~omni_grpc.server.stream.ServerStream`, the one way into the sessions, reads its first
message through this transport in time, opens or resumes, and says what the stream gets (the
call's key and place were checked before it was served, by :mod:`.auth` and
:mod:`.stream_cap`). Then the
reader takes requests with ``context.read()`` and hands them on with their length on the wire;
the writer drains the stream's send queue with ``context.write()``. A client
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

from omni_grpc.core import StreamRefused
from omni_grpc.core.errors import Status
from omni_grpc.server.host import SendQueue
from omni_grpc.server.sessions import SessionElsewhere, Sessions
from omni_grpc.server.status import rich_status
from omni_grpc.server.stream import SLOW_CONSUMER, ServerStream, StreamGate
from omni_grpc.server.stream_cap import StreamCap
from omni_grpc.wire import pb
from omni_grpc.wire.keys import REFUSAL_HEADER, ROUTE_HEADER, bearer_key, resume_token
from omni_grpc.wire.stream_end import StreamBroken

logger = logging.getLogger(__name__)

SERVICE = "omni.duplex.v1.DuplexService"
EOF = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs
# How long a stream cut for a slow reader waits for its write in flight before it gives up on
# telling the client why (a client that never reads again cannot be told anything).
SLOW_CONSUMER_GRACE_S = 30.0


class DuplexServicer:
    """Serves DuplexService over the sessions of one server."""

    def __init__(self, sessions: Sessions, route: str = "", cap: StreamCap | None = None) -> None:
        self.sessions = sessions
        # The server's keys were checked by the interceptor; the cap says when places run short.
        self._gate = StreamGate((), cap)
        # Sent as initial metadata on every call: the key a proxy routes back to this replica.
        self._route_metadata = ((ROUTE_HEADER, route),) if route else ()

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
            self.sessions.refusals.refused(
                "GetSession", request.session_id, context.peer(), refusal.code
            )
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
        # The key was checked by the interceptor; the session is bound and charged to it.
        key = bearer_key(tuple(context.invocation_metadata() or ()))
        stream = ServerStream(self.sessions, key, context.peer(), self._gate)
        told = False  # whether the stream said something while it waited (session_queued)

        async def tell(payload: bytes) -> None:
            nonlocal told
            if not told and self._route_metadata:
                await context.send_initial_metadata(self._route_metadata)
            told = True
            await context.write(payload)

        async def read_first() -> pb.ConverseRequest | None:
            raw = await context.read()
            if raw is EOF:
                raise StreamRefused(Status.INVALID_ARGUMENT, "bad_event", "the stream ended early")
            return _parse(raw)

        try:
            ending = await stream.open(read_first, tell, placed=True)
        except StreamBroken as failure:  # not for a Converse call: it was checked when served
            await context.abort(failure.status or grpc.StatusCode.UNKNOWN, str(failure))
            return
        except StreamRefused as refusal:
            if told:
                # Its headers went with session_queued: the refusal goes in band too, since a
                # proxy may lose the status of a stream the client has not half-closed.
                with contextlib.suppress(Exception):
                    await context.write(
                        pb.ConverseResponse(error=refusal.to_error()).SerializeToString()
                    )
                await _abort(context, refusal)
                return
            owner = refusal.route if isinstance(refusal, SessionElsewhere) else ""
            await _refuse_stream(context, refusal, ((ROUTE_HEADER, owner),) if owner else ())
            return
        if ending is not None:  # a resume's gap, or the missed ending of a closed session
            for payload in ending:
                await context.write(payload)
            return
        try:
            if self._route_metadata and not told:
                await context.send_initial_metadata(self._route_metadata)
            await _pump_stream(stream, context)
        finally:
            stream.release()


async def _pump_stream(stream: ServerStream, context: grpc.aio.ServicerContext) -> None:
    queue = stream.queue
    assert queue is not None
    reader = asyncio.create_task(_read(stream, context))
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


async def _read(stream: ServerStream, context: grpc.aio.ServicerContext) -> None:
    queue = stream.queue
    assert queue is not None
    read, write, command = context.read, context.write, stream.command
    parse = pb.ConverseRequest.FromString
    while (raw := await read()) is not EOF:
        size = len(raw)
        try:
            request: pb.ConverseRequest | None = parse(raw)
        except DecodeError:
            request = None  # answered with a typed error, and the stream goes on
        del raw  # a large append would otherwise be held twice while the host takes it
        # What the command made (an echoed chunk, an error) goes out from here, when no write
        # is in flight, without a hop to the writer task.
        pause_s = await command(request, size, write)
        del request  # not held while waiting for the next message
        if queue.end_reason is not None:
            return
        if pause_s > 0:
            await asyncio.sleep(pause_s)  # refused for rate: nothing is read meanwhile


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
