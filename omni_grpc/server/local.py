"""The in-process entry point: a bridge in the service's own process reaches the sessions
without a gRPC hop.

:class:`LocalService` stands beside :class:`~omni_grpc.server.servicer.DuplexServicer` and
offers what the bridge uses of a gRPC connection (``converse`` opening one stream), with the
same semantics: the first message opens or resumes through
:class:`~omni_grpc.server.sessions.Sessions`; every later command goes to the session host from
the caller's task, in order, as the servicer's reader hands it on; events come from the
stream's send queue. A refused stream fails its reads with the
:class:`~omni_grpc.client.channel.StreamBroken` a gRPC client would have read from the status
(code, retry hint, owner's route); ``cancel`` is the client going away, and the session waits
detached for a resume. What it saves per chunk is a gRPC client write and read and the server's
read and write, with their serializing and the HTTP/2 framing between them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import grpc

from omni_grpc.client.channel import StreamBroken
from omni_grpc.core import ResumeGap, StreamRefused
from omni_grpc.core.errors import Status
from omni_grpc.server import metrics
from omni_grpc.server.host import SendQueue, SessionHost
from omni_grpc.server.refusals import RefusalLog
from omni_grpc.server.servicer import SLOW_CONSUMER
from omni_grpc.server.sessions import ResumeFoundEnded, SessionElsewhere, Sessions
from omni_grpc.server.status import rich_status, unauthenticated
from omni_grpc.server.stream_cap import TOO_MANY_STREAMS, StreamCap
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_key, key_matches

PEER = "in-process"  # what the refusal log names as the peer of an in-process stream


def broken(refusal: StreamRefused, route: str = "") -> StreamBroken:
    """The failure a gRPC client reads from the status of a refused stream."""
    return StreamBroken(
        f"{rich_status(refusal).code.name}: {refusal.code}: {refusal.message}",
        status=rich_status(refusal).code,
        code=refusal.code,
        retry_after_s=refusal.retry_after_s if refusal.retryable else 0.0,
        route=route,
    )


class LocalService:
    """The sessions of this process, reached without a network hop."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        api_keys: Sequence[str] = (),
        max_streams: int = 1024,
        cap: StreamCap | None = None,
    ) -> None:
        self.sessions = sessions
        self._keys = tuple(api_keys)
        # The server's one bound on streams, shared with its Converse calls (see stream_cap);
        # a cap of its own (``max_streams``) when none is given.
        self.cap = cap if cap is not None else StreamCap(max_streams)
        self.refusals = RefusalLog(sessions.clock)

    @property
    def streams(self) -> int:
        """The streams that hold a place in the cap now (of every kind, when it is shared)."""
        return self.cap.open

    def converse(
        self, metadata: Sequence[tuple[str, str]] | None = None, peer: str = PEER
    ) -> LocalStream:
        """Starts a stream; it opens or resumes on its first write, as a Converse call does."""
        return LocalStream(self, tuple(metadata or ()), peer)

    async def close(self) -> None:
        """Nothing to close: the streams end with the relays that hold them."""


class LocalStream:
    """One stream into the sessions, with the reads and writes of a gRPC client's stream."""

    __slots__ = (
        "_backlog",
        "_cancelled",
        "_host",
        "_metadata",
        "_peer",
        "_queue",
        "_service",
        "_started",
    )

    def __init__(
        self, service: LocalService, metadata: tuple[tuple[str, str], ...], peer: str
    ) -> None:
        self._peer = peer  # who the refusal log names (a ConverseMany stream: its call's peer)
        self._service = service
        self._metadata = metadata
        self._host: SessionHost | None = None
        self._queue: SendQueue | None = None
        # Set once the first message was taken (or refused, as its exception).
        self._started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # What a stream with no session to attach to still sends (a resume's gap or ending).
        self._backlog: deque[bytes] = deque()
        self._cancelled = False

    async def write(self, request: pb.ConverseRequest) -> None:
        """Hands one request on; the first opens or resumes the session."""
        if self._cancelled:
            raise StreamBroken("the stream was cancelled")
        if not self._started.done():
            await self._start(request)
        elif (queue := self._queue) is not None and queue.end_reason is None:
            assert self._host is not None
            await self._host.receive(queue.generation, request)
        # Otherwise the service reads no more (as a gRPC server whose reader returned).

    async def read(self) -> pb.ConverseResponse | None:
        """The next event, or None once the service ended the stream."""
        payload = await self.read_serialized()
        return None if payload is None else pb.ConverseResponse.FromString(payload)

    async def read_serialized(self) -> bytes | None:
        """The next event as the journal keeps it (serialized), or None at the stream's end."""
        if not self._started.done() or self._started.exception() is not None:
            await self._started  # a refused stream raises its StreamBroken here
        queue = self._queue
        if queue is None:
            return self._backlog.popleft() if self._backlog else None
        payload = await queue.next()
        if self._cancelled:
            raise StreamBroken("the stream was cancelled")
        if queue.fell_behind.is_set():
            self._release()
            raise broken(SLOW_CONSUMER)
        if payload is None:
            self._release()
        return payload

    def take_now(self) -> bytes | None:
        """An event that may go out at once, taken by the task whose command made it (so the
        reading task is not woken for it); None when there is none or a write is in flight
        (:meth:`SendQueue.take_now`). Whoever takes one writes it through :meth:`write_out`."""
        queue = self._queue
        if queue is None or self._cancelled or self._host is None:
            return None
        return queue.take_now()

    async def write_out(self, write: Callable[[bytes], Awaitable[None]], payload: bytes) -> None:
        """Writes one event with ``write`` as the stream's one write in flight, so that events
        taken by :meth:`take_now` and by reads go out in the order they were taken."""
        queue = self._queue
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
        queue = self._queue
        if queue is not None:
            self._release()
            queue.end("cancelled")  # wakes a read waiting for the next event

    def _release(self) -> None:
        if self._queue is not None and self._host is not None:
            self._service.sessions.release(self._host, self._queue)
            self._service.cap.give()
            self._host = None

    async def _start(self, first: pb.ConverseRequest) -> None:
        service = self._service
        if service._keys and not key_matches(bearer_key(self._metadata), service._keys):
            # As the gRPC key check refuses the call (omni_grpc.server.auth).
            status = unauthenticated()
            message = f"{status.code.name}: {status.details}"
            self._refused(StreamBroken(message, status=status.code, code="unauthenticated"))
            return
        # A copy: the caller may send the same first message again on a retry.
        first = pb.ConverseRequest.FromString(first.SerializeToString())
        resume = first.resume_session if first.HasField("resume_session") else None
        # The place is taken before the open (which awaits), so no two streams take the last.
        if not service.cap.take():
            exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
            message = f"{exhausted.name}: {TOO_MANY_STREAMS}"
            self._refused(StreamBroken(message, status=exhausted))
            return
        attached = False
        try:
            attached = await self._attach(first, resume)
        finally:
            if not attached:
                service.cap.give()
        if not self._started.done():
            self._started.set_result(None)

    async def _attach(self, first: pb.ConverseRequest, resume: pb.ResumeSession | None) -> bool:
        """Opens or resumes; True when the stream attached to a session (its place held)."""
        service, sessions = self._service, self._service.sessions
        key = bearer_key(self._metadata)
        try:
            if first.client_seq != 0 or first.WhichOneof("command") not in (
                "open_session",
                "resume_session",
            ):
                raise StreamRefused(
                    Status.INVALID_ARGUMENT,
                    "bad_first_message",
                    "the first message must be open_session or resume_session, unnumbered",
                )
            if resume is None:
                host, queue = await sessions.open(first.open_session, key)
            else:
                host, queue = await sessions.resume(resume, key)
        except StreamRefused as refusal:
            # Counted and logged as the servicer does.
            what = "resume" if resume else "stream"
            metrics.STREAM_REFUSALS.labels(what, refusal.code).inc()
            if resume:
                metrics.RESUMES.labels("refused").inc()
            session_id = resume.session_id if resume else ""
            service.refusals.refused(what, session_id, self._peer, refusal.code)
            owner = refusal.route if isinstance(refusal, SessionElsewhere) else ""
            self._refused(broken(refusal, owner))
            return False
        except ResumeGap as gap:
            metrics.RESUMES.labels("gap").inc()
            self._backlog.append(gap.payload)  # resync_required; the client must start over
            return False
        except ResumeFoundEnded as ended:
            metrics.RESUMES.labels("ended").inc()
            self._backlog.extend(payload for _, payload in ended.effects.sends)
            return False
        self._host, self._queue = host, queue
        if self._cancelled:  # the client went while the session opened
            self._release()  # gives the place back
        return True

    def _refused(self, failure: StreamBroken) -> None:
        if not self._started.done():
            self._started.set_exception(failure)
            self._started.exception()  # read raises it; no warning when none comes


__all__ = ["LocalService", "LocalStream"]
