"""The machinery under :class:`~omni_grpc.client.DuplexClient`: keeping one session attached.

A :class:`SessionLink` owns the state that makes reconnects invisible: the journal of numbered
commands the server has not confirmed, the cursor of the last event received, the current
stream and the resume token. Three tasks share the work. The supervisor reads the current
stream and, when it breaks, resumes with the last event seq it received; the resend then writes
exactly the commands above the server's ``applied_client_seq`` before anything new. The acker
acknowledges delivered events (and, when commands wait for confirmation, asks for it with a
heartbeat). Callers write commands under the same lock as the resend, so commands hit the wire
in ``client_seq`` order and never interleave with one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass

from omni_grpc.client.bookkeeping import CommandJournal, EventCursor, EventGap
from omni_grpc.client.channel import Connection, Stream
from omni_grpc.client.dialer import Dialer, ResumeRequest
from omni_grpc.client.errors import (
    DuplexClientError,
    ProtocolViolation,
    ResyncRequired,
    SessionClosed,
    SessionEnded,
    SessionExpired,
    SessionReplaced,
)
from omni_grpc.client.options import ClientOptions, ClientStats
from omni_grpc.wire import pb
from omni_grpc.wire.stream_end import StreamBroken

logger = logging.getLogger(__name__)

_GOING_AWAY = "going_away"


@dataclass(frozen=True, slots=True)
class End:
    """How the event stream ends: with ``error`` raised, or quietly when it is None."""

    error: DuplexClientError | None


class SessionLink:
    """One session kept attached across streams; the client's public surface sits on top."""

    def __init__(
        self, connection: Connection, options: ClientOptions, *, last_seq: int = 0
    ) -> None:
        self._conn = connection
        self._options = options
        self._dialer = Dialer(
            connection,
            handshake_timeout_s=options.handshake_timeout_s,
            rng=random.Random(options.seed),
        )
        self.session_id = ""
        self._token = ""
        self.generation = 0
        self.session = pb.Session()
        self.capabilities = pb.Capabilities()
        self.applied_client_seq = 0
        self.stats = ClientStats()
        self._journal = CommandJournal(
            max_commands=options.max_unconfirmed_commands,
            max_bytes=options.max_unconfirmed_bytes,
        )
        self._cursor = EventCursor(last_seq)
        self._delivered_seq = self._acked_seq = last_seq
        self._since_ack = 0
        self._resumable = True
        self._closing = False
        self._stream: Stream | None = None  # set once a stream may take commands
        self._current: Stream | None = None  # the stream the supervisor reads
        self._write_lock = asyncio.Lock()
        self._room = asyncio.Event()
        self._ack_wakeup = asyncio.Event()
        self._probe = False
        self._terminal = asyncio.Event()
        self._final: End | None = None
        self._events: asyncio.Queue[pb.ConverseResponse | End] = asyncio.Queue(options.event_buffer)
        self._tasks: list[asyncio.Task[None]] = []
        self._resend: asyncio.Task[None] | None = None

    def _start(self, stream: Stream) -> None:
        self._stream = self._current = stream
        self._tasks = [
            asyncio.create_task(self._supervise(stream)),
            asyncio.create_task(self._ack_loop()),
        ]

    async def _send_unnumbered(self, request: pb.ConverseRequest) -> bool:
        async with self._write_lock:
            return await self._write_live(request)

    async def _write_live(self, request: pb.ConverseRequest) -> bool:
        """Writes on the live stream; a failure only drops the stream (the journal keeps the
        command, and the supervisor resumes)."""
        stream = self._stream
        if stream is None:
            return False
        try:
            await stream.write(request)
        except StreamBroken as broken:
            logger.debug(
                "session %s: write failed (%s)",
                self.session_id,
                broken,
                extra={"session_id": self.session_id},
            )
            if self._stream is stream:
                self._stream = None
            stream.cancel()  # the supervisor's read fails at once
            return False
        return True

    # -- receiving and reconnecting --------------------------------------------------------

    async def _supervise(self, stream: Stream) -> None:
        error: DuplexClientError | None = None
        try:
            while True:
                broken = await self._pump(stream)
                self._drop(stream)
                logger.info(
                    "session %s: stream lost (%s); resuming after seq %d",
                    self.session_id,
                    broken,
                    self._cursor.last_seq,
                    extra={"session_id": self.session_id},
                )
                stream = await self._reconnect()
        except SessionClosed as closed:
            error = None if self._closing else closed
        except DuplexClientError as failure:
            error = failure
        except Exception as unexpected:  # a bug here must still end events() visibly
            logger.exception(
                "session %s: client failure", self.session_id, extra={"session_id": self.session_id}
            )
            error = DuplexClientError(f"the client failed: {unexpected!r}")
        self._drop(self._current)
        await self._finish(error)

    async def _pump(self, stream: Stream) -> StreamBroken:
        """Reads one stream until it breaks (returned) or the session ends (raised)."""
        while True:
            try:
                event = await stream.read()
            except StreamBroken as broken:
                return broken
            if event is None:
                return StreamBroken("the server ended the stream")
            if await self._on_event(event) == _GOING_AWAY:
                stream.cancel()
                return StreamBroken("the server is going away")

    async def _on_event(self, event: pb.ConverseResponse) -> str | None:
        self._note_applied(event.applied_client_seq)
        kind = event.WhichOneof("event")
        if kind == "session_replaced":
            raise SessionReplaced(
                "another stream took the session over", session_id=self.session_id, event=event
            )
        try:
            if not self._cursor.admit(event.seq):
                self.stats.duplicate_events += 1
                return None
        except EventGap as gap:
            raise ProtocolViolation(str(gap)) from None
        if kind == "resync_required":
            # The journal overflowed: the stream goes on, but a later resume cannot replay.
            self._resumable = False
            logger.warning(
                "session %s: events are no longer replayable",
                self.session_id,
                extra={"session_id": self.session_id},
            )
        elif kind == "session_updated":
            self.session = event.session_updated.session
        elif kind in ("session_closed", "session_expired"):
            self._terminal.set()
        await self._events.put(event)
        if kind == "session_closed":
            raise SessionClosed(
                f"the session was closed ({event.session_closed.reason})",
                session_id=self.session_id,
                reason=event.session_closed.reason,
                event=event,
            )
        if kind == "session_expired":
            raise SessionExpired(
                "the session expired",
                session_id=self.session_id,
                reason=event.session_expired.reason,
                event=event,
            )
        return _GOING_AWAY if kind == "going_away" else None

    def _note_applied(self, applied: int) -> None:
        if applied > self.applied_client_seq:
            self.applied_client_seq = applied
            if self._journal.trim(applied):
                self._room.set()

    async def _reconnect(self) -> Stream:
        if not self._resumable:
            raise ResyncRequired(
                "the journal overflowed; missed events cannot be replayed",
                session_id=self.session_id,
                reason=pb.RESYNC_REASON_JOURNAL_OVERFLOW,
            )
        self.stats.reconnects += 1
        stream = await self._resume_stream(opening=False)
        self._current = stream
        self._resend = asyncio.create_task(self._resend_pending(stream))
        return stream

    async def _resume_stream(self, *, opening: bool) -> Stream:
        resume = ResumeRequest(
            session_id=self.session_id,
            token=self._token,
            last_seq=self._cursor.last_seq,
            grace_s=self.capabilities.disconnect_grace.ToMilliseconds() / 1000,
            closing=self._closing,
        )
        policy = self._options.open_retry if opening else self._options.reconnect
        stream, first = await self._dialer.resume(resume, policy)
        if not opening and first.applied_client_seq > self._journal.last_seq:
            stream.cancel()
            raise ProtocolViolation(
                f"the server applied client_seq {first.applied_client_seq}"
                f" but only {self._journal.last_seq} were sent"
            )
        resumed = first.session_resumed
        self.stats.resumed_applied = first.applied_client_seq
        self.stats.replayed_events += resumed.replayed_events
        if resumed.resume_token:  # a resume that only replays a session's ending has none
            self._token = resumed.resume_token
        self.generation = resumed.attachment_generation
        self.session = resumed.session
        self._note_applied(first.applied_client_seq)
        logger.info(
            "session %s resumed: generation %d, %d events replayed, applied %d",
            self.session_id,
            self.generation,
            resumed.replayed_events,
            first.applied_client_seq,
            extra={"session_id": self.session_id},
        )
        return stream

    async def _resend_pending(self, stream: Stream) -> None:
        """Sends again what the server has not applied, then lets commands flow."""
        async with self._write_lock:
            # Computed under the lock, so a command numbered while the stream was down is
            # either in this list or written after it, never both or neither.
            pending = self._journal.pending_after(self.applied_client_seq)
            for request in [*pending, self._receipt()]:
                try:
                    await stream.write(request)
                except StreamBroken:
                    return  # the supervisor sees the same break and resumes again
            if self._current is stream:
                self._stream = stream
            self.stats.resent_commands += len(pending)
            self.stats.last_resent = tuple(request.client_seq for request in pending)
        if pending:
            logger.info(
                "session %s: resent %d commands (client_seq %d..%d)",
                self.session_id,
                len(pending),
                pending[0].client_seq,
                pending[-1].client_seq,
                extra={"session_id": self.session_id},
            )

    # -- acknowledgements ------------------------------------------------------------------

    def _receipt(self) -> pb.ConverseRequest:
        """What goes out right after a resume, even with nothing to resend: the first message
        after ``session_resumed`` tells the server that the rotated resume token arrived, so
        it can forget the old one. An ack of what was delivered costs nothing."""
        return pb.ConverseRequest(ack_events=pb.AckEvents(seq=self._delivered_seq))

    async def _ack_loop(self) -> None:
        interval_s = (
            self._options.ack_interval_s
            or (self.capabilities.ack_interval.ToMilliseconds() / 1000)
            or 1.0
        )
        applied_before = self.applied_client_seq
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval_s):
                    await self._ack_wakeup.wait()
            self._ack_wakeup.clear()
            if self._stream is None:
                continue
            seq = self._delivered_seq
            if seq > self._acked_seq and await self._send_unnumbered(
                pb.ConverseRequest(ack_events=pb.AckEvents(seq=seq))
            ):
                self._acked_seq = seq
            # Appends produce no events, so nothing would tell how far the server got; a
            # heartbeat does (its ack carries applied_client_seq) and lets the journal shrink.
            stalled = len(self._journal) > 0 and self.applied_client_seq == applied_before
            if (self._probe or stalled) and await self._send_unnumbered(
                pb.ConverseRequest(heartbeat=pb.Heartbeat())
            ):
                self._probe = False
            applied_before = self.applied_client_seq

    # -- ending ----------------------------------------------------------------------------

    def _drop(self, stream: Stream | None) -> None:
        if self._resend is not None:
            self._resend.cancel()
            self._resend = None
        if stream is not None:
            if self._stream is stream:
                self._stream = None
            stream.cancel()

    async def _finish(self, error: DuplexClientError | None) -> None:
        """The supervisor's last act: record how the session ended and tell events()."""
        if self._final is None:
            self._final = End(error)
            if error is not None and not isinstance(error, SessionEnded):
                logger.warning(
                    "session %s: %s", self.session_id, error, extra={"session_id": self.session_id}
                )
        self._terminal.set()
        self._room.set()
        await self._events.put(self._final)

    async def _supervisor_done(self, timeout_s: float) -> None:
        if self._tasks:
            await asyncio.wait({self._tasks[0]}, timeout=timeout_s)

    async def _release(self, error: DuplexClientError | None) -> None:
        """Stops every task and closes the channel; idempotent. ``error`` is what events()
        raises once drained (None: it just ends), unless the session already ended."""
        if self._final is None:
            self._final = End(error)
        self._terminal.set()
        self._room.set()
        tasks = [task for task in (*self._tasks, self._resend) if task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks, self._resend = [], None
        self._drop(self._current)
        with contextlib.suppress(asyncio.QueueFull):
            self._events.put_nowait(self._final)
        await self._conn.close()
