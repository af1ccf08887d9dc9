"""Many Converse streams on a few ``ConverseMany`` calls: the bridge's link to a remote service.

:class:`MultiplexedConnection` offers what a relay needs of a connection (``converse`` opening
one stream; see ``bridge.transport``), but its streams share :data:`CALLS` calls of one channel
instead of a call each, and their requests and events travel in batches (each request
serialized once, as a Converse call would, and framed by hand into its batch). A batch holds what
the relays wrote while the previous write was in flight: a quiet call sends at once, a busy one
sends few large messages. Each stream ends as its Converse call would have, with the same
:class:`~omni_grpc.client.channel.StreamBroken` (status, error code, retry hint, owner's
route). A call presents an API key as a Converse call does, so streams share a call only with
streams of the same key (a bridge with a service key of its own has one set of calls; one that
passes each client's key on has a set per key, and a wrong key fails only its own call). A
resume sent on to another replica (a routing key in the stream's metadata) gets a call of its
own carrying that key, so a proxy takes it there.

A call can break under streams that have sent only their first request and heard nothing (the
replica behind it died a moment ago): they are placed on another call and send it again, as a
Converse call that failed before any answer would be opened again. Any other stream of a broken
call ends UNAVAILABLE, so its client resumes; a call refused for what it is (its key, the
server's stream limit) ends its streams with that refusal.

A stream's events wait in its own buffer until its relay reads them: the call never stops for
one slow reader, so the other streams' events keep flowing. The buffer is bounded: a stream
whose reader leaves :data:`MAX_BUFFERED_BYTES` unread is cut as the service cuts a Converse
call whose client stops reading (``RESOURCE_EXHAUSTED``, ``slow_consumer``): its buffered
events are dropped, the service is told to detach its session, and a resume replays them from
the journal (a replay arrives at once and is not counted: the journal's cap bounds it). Sizes
are taken only of events that wait behind others, so a reader that keeps up pays nothing for
the bound; an event that waits is also copied out of its batch, which it would otherwise keep
alive whole.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable, Sequence

import grpc

from omni_grpc.client.channel import ChannelSettings
from omni_grpc.wire import pb
from omni_grpc.wire.framing import length_field, varint_field
from omni_grpc.wire.keys import ROUTE_HEADER, bearer_key, bearer_metadata, route_of
from omni_grpc.wire.stream_end import StreamBroken

CALLS = 4  # calls the streams without a routing key are spread over
MOVES = 3  # how many broken calls an unanswered stream is moved away from
MAX_PENDING_REQUESTS = 4096  # requests waiting for a call's writer beyond which writers wait
# Unread event bytes beyond which a stream is cut: no less than a Converse call's send queue
# holds (2048 events, ~10 MB of 100 ms audio chunks), so this path cuts no reader that one
# keeps; a resume's replay is not counted (the journal bounds it, 8 MiB by default).
MAX_BUFFERED_BYTES = 16 * 1024 * 1024
# How the service ends a Converse call whose client fell behind (the servicer's SLOW_CONSUMER).
SLOW_CONSUMER = "slow_consumer"
_SLOW_CONSUMER_MESSAGE = (
    "RESOURCE_EXHAUSTED: slow_consumer: "
    "the client read too slowly; resume the session to get the missed events"
)
METHOD = "/omni.duplex.v1.DuplexService/ConverseMany"
_STATUSES = {status.value[0]: status for status in grpc.StatusCode}


def _broken(end: pb.StreamEnd) -> StreamBroken:
    return StreamBroken(
        end.message,
        status=_STATUSES.get(end.status_code, grpc.StatusCode.UNKNOWN),
        code=end.code,
        retry_after_s=end.retry_after.ToMilliseconds() / 1000,
        route=end.route,
    )


class MultiplexedConnection:
    """A channel to one target whose Converse streams share a few ConverseMany calls."""

    def __init__(self, settings: ChannelSettings, calls: int = CALLS) -> None:
        self.settings = settings
        self._channel = settings.open()
        # Batches go out as bytes framed here; the answers are parsed by protobuf.
        self._method = self._channel.stream_stream(
            METHOD,
            request_serializer=None,
            response_deserializer=pb.ConverseManyResponse.FromString,
        )
        self._calls = calls
        self._pools: dict[str, list[_Call]] = {}  # the calls of each API key in use
        self._routed: dict[tuple[str, str], _Call] = {}  # of each routing key (and API key)
        self._turn = itertools.count()

    def converse(self, metadata: Sequence[tuple[str, str]] | None = None) -> MultiplexedStream:
        """Starts a stream (it opens or resumes with its first write) on one of the calls."""
        chosen = self.settings.metadata() if metadata is None else tuple(metadata)
        stream = MultiplexedStream(bearer_key(chosen), route_of(chosen))
        self._place(stream)
        return stream

    def _place(self, stream: MultiplexedStream) -> None:
        """Puts a stream on a live call of its key: its routing key's own, or one of the pool."""
        keyed = bearer_metadata(stream.key)
        if stream.route:
            call = self._routed.get((stream.route, stream.key))
            if call is None or call.broken is not None:
                metadata = (*keyed, (ROUTE_HEADER, stream.route))
                call = _Call(self._method, metadata, self._place)
                self._routed[stream.route, stream.key] = call
        else:
            pool = [call for call in self._pools.get(stream.key, ()) if call.broken is None]
            if len(pool) < self._calls:
                pool.append(_Call(self._method, keyed, self._place))
            self._pools[stream.key] = pool
            call = pool[next(self._turn) % len(pool)]
        call.take(stream)

    async def close(self) -> None:
        """Closes the channel, ending every call and stream on it."""
        for pool in self._pools.values():
            for call in pool:
                call.cancel()
        for call in self._routed.values():
            call.cancel()
        await self._channel.close(None)


class _Call:
    """One ConverseMany call: its streams, a writer that batches requests, a reader."""

    def __init__(
        self,
        method: grpc.aio.StreamStreamMultiCallable,
        metadata: tuple[tuple[str, str], ...],
        place: Callable[[MultiplexedStream], None],
    ) -> None:
        self._call = method(None, metadata=metadata)
        self._place = place  # where an unanswered stream of this call goes if the call breaks
        self._streams: dict[int, MultiplexedStream] = {}
        self._ids = itertools.count(1)
        self._pending: list[bytes] = []  # framed ConverseManyRequest.requests entries
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.broken: StreamBroken | None = None
        self._tasks = [asyncio.create_task(self._write()), asyncio.create_task(self._read())]

    def take(self, stream: MultiplexedStream) -> None:
        """Carries ``stream`` from now on (its first request again, if it sent one)."""
        stream.call, stream.id = self, next(self._ids)
        self._streams[stream.id] = stream
        if stream.first is not None:
            self.queue(stream.framed_first())

    def forget(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)

    async def send(self, request: bytes) -> None:
        while not self._room.is_set():
            await self._room.wait()
        self.queue(request)

    def queue(self, request: bytes) -> None:
        self._pending.append(request)
        if len(self._pending) >= MAX_PENDING_REQUESTS:
            self._room.clear()
        self._ready.set()

    def cancel(self) -> None:
        self._call.cancel()
        for task in self._tasks:
            task.cancel()
        self._fail(StreamBroken("the stream was cancelled"))

    async def _write(self) -> None:
        try:
            while True:
                await self._ready.wait()
                batch, self._pending = self._pending, []
                self._ready.clear()
                self._room.set()
                await self._call.write(b"".join(batch))
        except (grpc.RpcError, asyncio.InvalidStateError):
            return  # the reader learns why the call ended

    async def _read(self) -> None:
        failure = StreamBroken("the multiplexed call ended", status=grpc.StatusCode.UNAVAILABLE)
        try:
            while (reply := await self._call.read()) is not grpc.aio.EOF:  # type: ignore[attr-defined]
                assert isinstance(reply, pb.ConverseManyResponse)
                for event in reply.events:
                    stream = self._streams.get(event.stream_id)
                    if stream is None:
                        continue
                    if event.HasField("end"):
                        self.forget(event.stream_id)
                        stream.end(None if event.end.status_code == 0 else _broken(event.end))
                    elif not stream.deliver(event.event):
                        stream.fell_behind()  # its buffer is full: cut, as Converse cuts
        except grpc.RpcError as error:
            failure = StreamBroken.from_error(error)
            if failure.status in (None, grpc.StatusCode.CANCELLED):
                # Not the relay's own cancel: a proxy dropped the call (its replica died).
                failure = StreamBroken(str(failure), status=grpc.StatusCode.UNAVAILABLE)
        except asyncio.CancelledError:
            failure = StreamBroken("the stream was cancelled")
        self._fail(failure)

    def _fail(self, failure: StreamBroken) -> None:
        if self.broken is None:
            self.broken = failure
        streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            # Only a call that broke (UNAVAILABLE) moves its streams: one refused for its key or
            # the server's limit would be refused again.
            if failure.status is grpc.StatusCode.UNAVAILABLE and stream.movable():
                stream.moves += 1
                self._place(stream)
            else:
                stream.end(failure)


class MultiplexedStream:
    """One Converse stream carried on a ConverseMany call."""

    __slots__ = (
        "_buffered",
        "_ended",
        "_events",
        "_failure",
        "_replaying",
        "_sent",
        "_waiter",
        "call",
        "first",
        "id",
        "key",
        "moves",
        "route",
    )

    def __init__(self, key: str, route: str) -> None:
        self.call: _Call | None = None
        self.id = 0
        self.key = key  # the API key it presents, and its call too
        self.route = route  # the routing key its call carries; empty: any replica
        self.first: bytes | None = None  # the first request, serialized, until an answer
        self._sent = 0
        self.moves = 0
        # Unread events with the bytes each was charged (0: it waited behind no other).
        self._events: deque[tuple[pb.ConverseResponse, int]] = deque()
        self._buffered = 0  # the bytes charged for the unread events
        self._replaying = 0  # events of a resume's replay still to come (never charged)
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._failure: StreamBroken | None = None

    @property
    def ended(self) -> bool:
        """Whether the stream has ended (its unread events, if any, still to be read)."""
        return self._ended

    @property
    def buffered_bytes(self) -> int:
        """The bytes of unread events counted against :data:`MAX_BUFFERED_BYTES` now."""
        return self._buffered

    def movable(self) -> bool:
        """Whether it may go to another call: only its first request sent, nothing heard."""
        unanswered = self._sent == 0 or (self._sent == 1 and self.first is not None)
        return unanswered and not self._ended and self.moves < MOVES

    def framed_first(self) -> bytes:
        assert self.first is not None
        body = varint_field(1, self.id) + length_field(2, self.first)
        return length_field(1, body + length_field(3, self.key.encode()))

    async def write(self, request: pb.ConverseRequest) -> None:
        """Sends one request with the call's next batch."""
        if self._ended:
            if self._failure is not None and self._failure.status is None:
                raise self._failure  # cancelled: as a cancelled Converse call's write
            return  # the service ended the stream: it reads no more
        assert self.call is not None
        self._sent += 1
        if self.first is None and self._sent == 1:
            self.first = request.SerializeToString()
            await self.call.send(self.framed_first())
            return
        body = varint_field(1, self.id) + length_field(2, request.SerializeToString())
        await self.call.send(length_field(1, body))

    async def read(self) -> pb.ConverseResponse | None:
        """The next event, or None once the service ended the stream."""
        while not self._events:
            if self._ended:
                if self._failure is not None:
                    raise self._failure
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        event, charged = self._events.popleft()
        self._buffered -= charged
        return event

    def cancel(self) -> None:
        """Drops the stream; the service detaches its session, which stays resumable."""
        self._leave(StreamBroken("the stream was cancelled"))

    def fell_behind(self) -> None:
        """Its reader left too much unread: cut as the service cuts a Converse call whose
        client stops reading; the session detaches and the journal keeps what was dropped."""
        exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
        self._leave(StreamBroken(_SLOW_CONSUMER_MESSAGE, status=exhausted, code=SLOW_CONSUMER))

    def _leave(self, failure: StreamBroken) -> None:
        """Ends the stream from this side: the service is told (as a cancelled call tells it)
        and detaches the session; the unread events go."""
        if self._ended:
            return
        if self.call is not None:
            self.call.forget(self.id)
            if self._sent:
                self.call.queue(length_field(1, varint_field(1, self.id) + varint_field(4, 1)))
        self._events.clear()
        self._buffered = 0
        self.end(failure)

    def deliver(self, event: pb.ConverseResponse) -> bool:
        """Buffers one event for the reader; False when the buffer is full (nothing kept)."""
        if self.first is not None:  # its first answer: it stays with its call now
            self.first = None
            if event.WhichOneof("event") == "session_resumed":
                self._replaying = event.session_resumed.replayed_events
        replayed = self._replaying > 0
        if replayed:
            self._replaying -= 1
        charged = 0
        if self._events:  # it waits behind another
            # A copy of its own: an event read from a batch holds the whole batch (the other
            # streams' events too) in memory for as long as it waits (~1.4 us for 4.8 kB).
            waiting = pb.ConverseResponse()
            waiting.CopyFrom(event)
            event = waiting
            if not replayed:  # a replay comes at once, bounded by the journal's own cap
                charged = waiting.ByteSize()
                if self._buffered + charged > MAX_BUFFERED_BYTES:
                    return False
                self._buffered += charged
        self._events.append((event, charged))
        self._wake()
        return True

    def end(self, failure: StreamBroken | None) -> None:
        if not self._ended:
            self._ended, self._failure = True, failure
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


__all__ = ["MultiplexedConnection", "MultiplexedStream"]
