"""``ConverseMany``: many Converse streams on one gRPC call, for a bridge in its own process.

Each stream of the call is a :class:`~omni_grpc.server.local_stream.LocalStream`, as a bridge's
in-process stream is, so it opens, resumes, numbers and ends exactly as a Converse call does
(:mod:`omni_grpc.server.stream`): its own key is checked again (the call's was checked before it
reached this, :mod:`omni_grpc.server.auth`) and it takes a place in the server's one stream cap
(:mod:`omni_grpc.server.stream_cap`). Per stream a feeder
hands its requests to the session in order (a stream held back by its rate limit holds back no
other) and a pump takes its events. Events leave in batches: the writer sends, in one
message, everything the pumps queued while its previous write was in flight, so a quiet call
answers at once and a busy one sends few large messages; a batch larger than the call's send
limit (:func:`send_limit`) goes as several messages, so the events of many streams together
never end the call (one message over the limit would end it, and every stream on it). Events
go out as the journal serialized them, framed by hand (a ``StreamEvent`` is its stream id and
the event's bytes), never parsed again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import grpc

from omni_grpc.server.local_stream import LocalStream
from omni_grpc.server.sessions import Sessions
from omni_grpc.server.stream import StreamGate
from omni_grpc.wire import pb
from omni_grpc.wire.framing import length_field, varint_field
from omni_grpc.wire.keys import ROUTE_HEADER, bearer_metadata
from omni_grpc.wire.stream_end import StreamBroken

EOF = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs
METHOD = "ConverseMany"
# Serialized events waiting for the writer beyond which the pumps wait (each stream's own
# send queue then fills, and a stream whose client does not read is cut as on Converse). Only
# a client that stops reading the whole call gets here: the bridge's link always reads it and
# bounds each stream's unread events itself (omni_grpc.client.multiplex).
MAX_PENDING_BYTES = 8 * 1024 * 1024
# Requests of one stream held unread (its session paused by a rate limit, or busy) beyond which
# the stream is cut. On a Converse call gRPC's flow control holds such a client back; a shared
# call cannot hold back one stream alone without stalling the others, and an unbounded inbox
# would let a client that ignores its rate limit grow the server's memory.
MAX_UNREAD_REQUESTS = 256
MAX_UNREAD_BYTES = 16 * 1024 * 1024
# The retry hint of a stream cut for that: about what a rate limit's refusal asks.
OVERRUN_RETRY_AFTER_S = 1.0
# The streams one call may hold on a server with no stream cap (its settings' default).
DEFAULT_STREAM_LIMIT = 1024
# A new stream on a call that holds as many as the server's whole stream cap: refused before
# anything is made for it (the cap itself would refuse it at its first message, after a stream
# object and two tasks existed for it).
CALL_FULL = StreamBroken(
    "the call holds as many streams as the server serves: start another call",
    status=grpc.StatusCode.RESOURCE_EXHAUSTED,
    code="resource_exhausted",
    retry_after_s=OVERRUN_RETRY_AFTER_S,
)


def send_limit(max_message_bytes: int) -> int:
    """The largest message the server sends: the contract's largest command (an event echoes
    at most about as much, such as a session's tools) and room for its envelope."""
    return max_message_bytes + 1024 * 1024


def _framed(stream_id: int, event: bytes) -> bytes:
    """One ``ConverseManyResponse.events`` entry: StreamEvent{stream_id, event}, serialized."""
    return length_field(1, varint_field(1, stream_id) + length_field(2, event))


def _ended(stream_id: int, broken: StreamBroken | None) -> bytes:
    end = pb.StreamEnd()
    if broken is not None:
        end.status_code = broken.status.value[0] if broken.status is not None else 2  # UNKNOWN
        end.message, end.code, end.route = str(broken), broken.code, broken.route
        end.retry_after.FromMilliseconds(round(broken.retry_after_s * 1000))
    return length_field(1, pb.StreamEvent(stream_id=stream_id, end=end).SerializeToString())


class MultiplexServicer:
    """Serves ConverseMany over the in-process entry point of this server's sessions."""

    def __init__(
        self, sessions: Sessions, gate: StreamGate, route: str = "", *, send_limit_bytes: int
    ) -> None:
        self._sessions = sessions
        self._gate = gate  # the server's keys and its one stream cap
        self._route_metadata = ((ROUTE_HEADER, route),) if route else ()
        self._send_limit = send_limit_bytes

    def handler(self) -> grpc.RpcMethodHandler:
        """The method's handler: batches parsed by protobuf, events sent as framed bytes."""
        return grpc.stream_stream_rpc_method_handler(
            self.converse_many,
            request_deserializer=pb.ConverseManyRequest.FromString,
            response_serializer=None,
        )

    async def converse_many(
        self, request_iterator: object, context: grpc.aio.ServicerContext
    ) -> None:
        if self._route_metadata:
            await context.send_initial_metadata(self._route_metadata)
        call = _Call(self._sessions, self._gate, context, self._send_limit)
        await call.run()


class _Call:
    """One ConverseMany call: its streams, and the writer that batches their events."""

    def __init__(
        self,
        sessions: Sessions,
        gate: StreamGate,
        context: grpc.aio.ServicerContext,
        send_limit: int,
    ) -> None:
        self._sessions = sessions
        self._gate = gate
        # The streams one call may hold: the server's whole cap (a new one past it is refused
        # before anything is made for it).
        self._stream_limit = gate.cap.limit if gate.cap is not None else DEFAULT_STREAM_LIMIT
        self._context = context
        self._send_limit = send_limit
        self._streams: dict[int, _Substream] = {}
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._ready = asyncio.Event()  # something waits for the writer
        self._room = asyncio.Event()  # the pending bytes are under the bound
        self._room.set()

    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        try:
            while (batch := await self._context.read()) is not EOF:
                if self._new_streams(batch) > self._stream_limit:
                    # More new streams in one message than the server serves at all: no client
                    # of ours sends that, and each would cost two tasks before its first check.
                    await self._context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"a batch may start at most {self._stream_limit} streams",
                    )
                for request in batch.requests:
                    if (overrun := self._dispatch(request)) is not None:
                        await self.send(overrun)
        finally:
            # The client went (or half-closed): its streams go, their sessions stay resumable.
            for stream in list(self._streams.values()):
                stream.cancel()
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    def _new_streams(self, batch: pb.ConverseManyRequest) -> int:
        """How many of ``batch``'s requests name a stream the call does not have yet."""
        streams = self._streams
        return sum(1 for r in batch.requests if not r.cancel and r.stream_id not in streams)

    def _dispatch(self, request: pb.StreamRequest) -> bytes | None:
        """Hands a request to its stream; the framed end of a stream it overran, if it did, or
        of a new one past the streams the call may hold (the server's whole cap)."""
        stream = self._streams.get(request.stream_id)
        if request.cancel:
            if stream is not None:
                stream.cancel()
            return None
        if stream is None and len(self._streams) >= self._stream_limit:
            return _ended(request.stream_id, CALL_FULL)  # no stream object, no task
        if stream is None:
            metadata: Sequence[tuple[str, str]] = bearer_metadata(request.api_key)
            peer = self._context.peer()
            local = LocalStream(self._sessions, self._gate, tuple(metadata), peer)
            stream = _Substream(self, request.stream_id, local)
            self._streams[request.stream_id] = stream
        return None if stream.take(request.request) else stream.overrun()

    def forget(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)

    async def send(self, framed: bytes) -> None:
        """Queues one framed event for the next batch, waiting while the batch is too big."""
        while not self._room.is_set():
            await self._room.wait()
        self._pending.append(framed)
        self._pending_bytes += len(framed)
        if self._pending_bytes >= MAX_PENDING_BYTES:
            self._room.clear()
        self._ready.set()

    async def _write(self) -> None:
        while True:
            await self._ready.wait()
            batch, self._pending, self._pending_bytes = self._pending, [], 0
            self._ready.clear()
            self._room.set()
            start, size = 0, 0
            for end, framed in enumerate(batch):
                if size + len(framed) > self._send_limit and end > start:
                    await self._context.write(b"".join(batch[start:end]))
                    start, size = end, 0
                size += len(framed)
            await self._context.write(b"".join(batch[start:]))


class _Substream:
    """One stream of a call: a feeder for its requests and a pump for its events."""

    def __init__(self, call: _Call, stream_id: int, stream: LocalStream) -> None:
        self.id = stream_id
        self._call = call
        self._stream = stream
        self._inbox: asyncio.Queue[tuple[pb.ConverseRequest, int]] = asyncio.Queue()
        self._unread_bytes = 0  # of the requests in the inbox and the one being handed on
        self._feeder = asyncio.create_task(self._feed())
        self._pump = asyncio.create_task(self._pump_events())

    def cancel(self) -> None:
        self._call.forget(self.id)
        self._stream.cancel()
        self._feeder.cancel()
        self._pump.cancel()

    def take(self, request: pb.ConverseRequest) -> bool:
        """Queues a request for the session; False if that would pass the unread bound."""
        size = request.ByteSize()
        if (
            self._inbox.qsize() >= MAX_UNREAD_REQUESTS
            or self._unread_bytes + size > MAX_UNREAD_BYTES
        ):
            return False
        self._unread_bytes += size
        self._inbox.put_nowait((request, size))
        return True

    def overrun(self) -> bytes:
        """Cuts the stream whose client sent past the unread bound, as rate-limited: its
        session waits, detached, for a resume (which replays what it missed, and after which
        the client sends again what the session did not acknowledge). Requests the client had
        already sent on this id reach a stream that never opened, and are refused there."""
        self.cancel()
        broken = StreamBroken(
            "the stream sent more than its session had read: resume after the retry hint",
            status=grpc.StatusCode.RESOURCE_EXHAUSTED,
            code="rate_limit_exceeded",
            retry_after_s=OVERRUN_RETRY_AFTER_S,
        )
        return _ended(self.id, broken)

    async def _feed(self) -> None:
        with contextlib.suppress(StreamBroken):
            while True:
                request, size = await self._inbox.get()
                await self._stream.write(request, size)
                self._unread_bytes -= size

    async def _pump_events(self) -> None:
        broken: StreamBroken | None = None
        try:
            while (event := await self._stream.read_serialized()) is not None:
                await self._call.send(_framed(self.id, event))
        except StreamBroken as failure:
            broken = failure
        self._call.forget(self.id)
        self._feeder.cancel()
        await self._call.send(_ended(self.id, broken))


__all__ = ["METHOD", "MultiplexServicer", "send_limit"]
