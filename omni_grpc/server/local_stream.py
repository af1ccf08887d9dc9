"""One stream into the sessions with the reads and writes of a gRPC client's stream.

:class:`LocalStream` adapts a :class:`~omni_grpc.server.stream.ServerStream`, the one way into
the sessions, to a gRPC client stream's reads and writes, for the two transports that carry
streams without a Converse call of their own: a bridge in the service's own process
(:mod:`.local`) and the streams of a ``ConverseMany`` call (:mod:`.multiplex`). The first write
opens or resumes (through :meth:`ServerStream.open`, which applies the checks before a stream
opens); every later command goes to the session host from the caller's task, in order; events
come from the stream's send queue. A refused stream fails its reads with the
:class:`~omni_grpc.wire.stream_end.StreamBroken` a gRPC client would have read from the status
(code, retry hint, owner's route); ``cancel`` is the client going away, and the session waits
detached for a resume.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from omni_grpc.core import StreamRefused
from omni_grpc.server.sessions import Sessions
from omni_grpc.server.stream import SLOW_CONSUMER, ServerStream, StreamGate, broken
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_key
from omni_grpc.wire.stream_end import StreamBroken


class LocalStream:
    """One stream into the sessions, with the reads and writes of a gRPC client's stream."""

    __slots__ = ("_backlog", "_cancelled", "_started", "_stream", "_told")

    def __init__(
        self,
        sessions: Sessions,
        gate: StreamGate,
        metadata: tuple[tuple[str, str], ...],
        peer: str,
    ) -> None:
        # The refusal log names ``peer`` (a ConverseMany stream: its call's peer). The stream
        # takes a place of its key in the cap (none of an address: a ConverseMany call holds
        # that of its own).
        key = bearer_key(metadata)
        self._stream = ServerStream(sessions, key, peer, gate)
        # Set once the first message was taken (or refused, as its exception).
        self._started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # What a stream sends without a session's send queue: session_queued while it waits
        # for a place, a resume's gap or ending.
        self._backlog: deque[bytes] = deque()
        self._told = asyncio.Event()  # set by each notice while it waits, and when it starts
        self._cancelled = False

    async def write(
        self, request: pb.ConverseRequest, size: int = 0, *, flush_follows: bool = False
    ) -> None:
        """Hands one request on (``size``: its length on the wire, when it came by one); the
        first opens or resumes the session. ``flush_follows``: the caller calls :meth:`flush`
        right after, so what the command makes is held for that flush and the task that reads
        the stream is not woken for it (``SendQueue.reader_flushes``; the flush ends the hold,
        and so does anything here or in the host that may wait before it)."""
        if self._cancelled:
            raise StreamBroken("the stream was cancelled")
        if not self._started.done():
            await self._start(request)
        elif (queue := self._stream.queue) is not None and queue.end_reason is None:
            if flush_follows:
                queue.reader_flushes = True
            pause_s = await self._stream.command(request, size)
            if pause_s > 0:
                # Refused for rate: the writer is held back until the hint has run out, as
                # gRPC's flow control holds back a Converse client whose reader pauses; what
                # the refusal made goes to the reading task meanwhile.
                queue.reader_done()
                await asyncio.sleep(pause_s)
        # Otherwise the service reads no more (as a gRPC server whose reader returned).

    async def read(self) -> pb.ConverseResponse | None:
        """The next event, or None once the service ended the stream."""
        payload = await self.read_serialized()
        return None if payload is None else pb.ConverseResponse.FromString(payload)

    async def read_serialized(self) -> bytes | None:
        """The next event as the journal keeps it (serialized), or None at the stream's end."""
        while not self._started.done():  # it may wait for a place, told where it stands
            if self._backlog:
                return self._backlog.popleft()
            self._told.clear()
            await self._told.wait()
        if self._started.exception() is not None:
            await self._started  # a refused stream raises its StreamBroken here
        if self._backlog:  # what it was told while it waited, before the session's events
            return self._backlog.popleft()
        queue = self._stream.queue
        if queue is None:
            return None
        payload = await queue.next()
        if self._cancelled:
            raise StreamBroken("the stream was cancelled")
        if queue.fell_behind.is_set():
            self._release()
            raise broken(SLOW_CONSUMER)
        if payload is None:
            self._release()
        return payload

    async def flush(self, write: Callable[[bytes], Awaitable[None]]) -> None:
        """Writes with ``write``, at once, what the last command made (:meth:`SendQueue.flush`),
        from the task that wrote the command, so the reading task is not woken for it."""
        queue = self._stream.queue
        if queue is not None and not self._cancelled and self._stream.host is not None:
            await queue.flush(write)
        elif queue is not None:
            queue.reader_done()  # a hold of :meth:`write`'s ends here all the same

    async def write_out(self, write: Callable[[bytes], Awaitable[None]], payload: bytes) -> None:
        """Writes one event read by :meth:`read_serialized` with ``write``, as the stream's one
        write in flight, so that events flushed and read go out in the order they were made."""
        queue = self._stream.queue
        if queue is None:
            await write(payload)
        else:
            await queue.write_out(write, payload)

    def cancel(self) -> None:
        """The client went away: the stream goes, the session waits for a resume."""
        if self._cancelled:
            return
        self._cancelled = True
        self._refused(StreamBroken("the stream was cancelled"))
        queue = self._stream.queue
        if queue is not None:
            self._release()
            queue.end("cancelled")  # wakes a read waiting for the next event

    def _release(self) -> None:
        if self._stream.host is not None:
            self._stream.release()  # gives its place back too

    async def _start(self, first: pb.ConverseRequest) -> None:
        # A copy: the caller may send the same first message again on a retry.
        first = pb.ConverseRequest.FromString(first.SerializeToString())

        async def given() -> pb.ConverseRequest:
            return first

        try:
            ending = await self._stream.open(given, self._tell)
            if ending is None:
                if self._cancelled:  # the client went while the session opened
                    self._release()  # gives the place back
            else:
                self._backlog.extend(ending)
        except StreamBroken as failure:  # no valid key, or the server's bound
            self._refused(failure)
        except StreamRefused as refusal:
            self._refused(broken(refusal))
        if not self._started.done():
            self._started.set_result(None)
            self._told.set()

    async def _tell(self, payload: bytes) -> None:
        """What the stream is told while it waits for a place: read before it starts."""
        self._backlog.append(payload)
        self._told.set()

    def _refused(self, failure: StreamBroken) -> None:
        if not self._started.done():
            self._started.set_exception(failure)
            self._started.exception()  # read raises it; no warning when none comes
            self._told.set()


__all__ = ["LocalStream"]
