"""One way into the sessions: every transport's streams attach, speak and end through here.

A stream comes as a ``Converse`` call (:mod:`.servicer`), as a stream of a ``ConverseMany`` call
(:mod:`.multiplex`), or from a bridge in the service's own process (:mod:`.local`). Each wraps
its stream in a :class:`ServerStream` and only moves bytes; the rules of a stream are here, once,
and :meth:`ServerStream.open` applies the checks before a stream opens, in this order:

* **The key**, when the server has keys (:class:`StreamGate`): a stream without a valid one is
  refused ``UNAUTHENTICATED`` (a Converse call's key was checked before it was served, by
  :mod:`.auth`, so it passes here).
* **A place** in the server's one stream cap (:mod:`.stream_cap`), of the stream's key, taken
  before the first message is awaited (so two streams cannot take the last one) and given back
  when the stream goes; a Converse call's place is its call's (the cap's interceptor holds it
  while the call runs, so that a call refused for it is refused before it is served).
* **The first message in time**: within :data:`FIRST_MESSAGE_TIMEOUT_S`, or
  :data:`SHORT_FIRST_MESSAGE_S` of the stream's start while places run short (a stream that says
  nothing holds a place of its key for nothing); ``config_timeout`` otherwise.
* **The refusal**: each is counted and logged once (:mod:`.refusals`), and raised for the
  transport to end the stream with (:func:`broken` renders one for a stream that is not a gRPC
  call, in the words a gRPC client would have read).

* **The first message** must be an unnumbered open or resume; anything else is refused before
  a session is touched (``bad_first_message``; ``invalid_message`` when it is no
  ``ConverseRequest`` at all).
* **Attaching** opens or resumes the session through :class:`~.sessions.Sessions`. A refusal is
  counted (``omni_grpc_stream_refusals``, ``omni_grpc_resumes``) and logged with the peer
  (:mod:`.refusals`), then raised for the transport to end the stream with; a resume that
  found a gap or its session ended gets what it must still read, and the stream ends after it.
  At capacity a new session waits for a place first (:mod:`.waiting`), its stream told where
  it stands through the transport's ``tell``; a wait another stream took over just ends.
* **Commands** go to the session host from the stream's reader, in order, with their length on
  the wire when the transport read it; what a command made goes out from the reader at once
  (the send queue's fast path) and the rest through the stream's writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

import grpc

from omni_grpc.core import ResumeGap, StreamRefused
from omni_grpc.core.errors import CommandError, Status
from omni_grpc.server import metrics
from omni_grpc.server.host import SendQueue, SessionHost
from omni_grpc.server.sessions import ResumeFoundEnded, SessionElsewhere, Sessions
from omni_grpc.server.status import rich_status, unauthenticated
from omni_grpc.server.stream_cap import TOO_MANY_STREAMS, StreamCap
from omni_grpc.server.waiting import Tell, WaitEnded, told_nobody
from omni_grpc.wire import pb
from omni_grpc.wire.keys import key_matches
from omni_grpc.wire.stream_end import StreamBroken

FIRST_COMMANDS = ("open_session", "resume_session")
NOT_A_REQUEST = "the message is not a ConverseRequest"
FIRST_MESSAGE_TIMEOUT_S = 10.0
SHORT_FIRST_MESSAGE_S = 1.0
# How a stream ends when its reader falls too far behind (see SendQueue.fall_behind). The
# session is only detached: the client resumes and gets what it missed from the journal.
SLOW_CONSUMER = StreamRefused(
    Status.RESOURCE_EXHAUSTED,
    "slow_consumer",
    "the client read too slowly; resume the session to get the missed events",
    retryable=True,
)
# Reads a stream's first message (None: it is no ConverseRequest); raises StreamRefused when
# the stream ended before it.
FirstMessage = Callable[[], Awaitable[pb.ConverseRequest | None]]


@dataclass(frozen=True, slots=True)
class StreamGate:
    """What every stream must pass before it opens: the server's keys (none: no key is
    anyone's own) and its one stream cap."""

    keys: tuple[str, ...] = ()
    cap: StreamCap | None = None


def first_message_refused(first: pb.ConverseRequest | None) -> StreamRefused | None:
    """The refusal of a stream whose first message is not an unnumbered open or resume
    (None: the message could not be parsed); None when it is one."""
    if first is None:
        return StreamRefused(Status.INVALID_ARGUMENT, "invalid_message", NOT_A_REQUEST)
    if first.client_seq != 0 or first.WhichOneof("command") not in FIRST_COMMANDS:
        return StreamRefused(
            Status.INVALID_ARGUMENT,
            "bad_first_message",
            "the first message must be open_session or resume_session, unnumbered",
        )
    return None


def broken(refusal: StreamRefused) -> StreamBroken:
    """The failure a gRPC client reads from the status of a refused stream."""
    status = rich_status(refusal)
    return StreamBroken(
        f"{status.code.name}: {refusal.code}: {refusal.message}",
        status=status.code,
        code=refusal.code,
        retry_after_s=refusal.retry_after_s if refusal.retryable else 0.0,
        route=refusal.route if isinstance(refusal, SessionElsewhere) else "",
    )


class ServerStream:
    """One stream into the sessions, whichever transport carries it (see the module)."""

    __slots__ = ("_gate", "_key", "_peer", "_place", "_sessions", "host", "queue")

    def __init__(
        self, sessions: Sessions, key: str, peer: str, gate: StreamGate | None = None
    ) -> None:
        self._sessions = sessions
        self._key = key  # checked in open(); the session is bound and charged to it
        self._peer = peer  # who the refusal log names
        self._gate = gate if gate is not None else StreamGate()
        self._place: str | None = None  # the key whose place the stream holds in the cap
        self.host: SessionHost | None = None
        # The attached stream's send queue: its writer drains it (see send_queue.py).
        self.queue: SendQueue | None = None

    async def open(
        self, read_first: FirstMessage, tell: Tell = told_nobody, *, placed: bool = False
    ) -> list[bytes] | None:
        """Applies the checks before a stream opens (see the module), then attaches as
        :meth:`attach` does, with what it returns. ``placed``: the transport's call holds
        the stream's place already (a Converse call).

        Raises StreamRefused, counted and logged, for a refusal after the key; StreamBroken,
        in gRPC's own words, for a stream without a valid key or beyond the server's bound.
        """
        gate, key = self._gate, self._key
        if gate.keys and not key_matches(key, gate.keys):
            status = unauthenticated()
            message = f"{status.code.name}: {status.details}"
            raise StreamBroken(message, status=status.code, code="unauthenticated")
        if not placed and gate.cap is not None:
            self._take_place(gate.cap, key if gate.keys else "")
        try:
            try:
                first = await self._first_in_time(read_first)
            except StreamRefused as refusal:
                self.refused(refusal)  # refused before the stream could say anything
                raise
            ending = await self.attach(first, tell)
        except BaseException:
            self._give_place()
            raise
        if ending is not None:
            self._give_place()
        return ending

    def _take_place(self, cap: StreamCap, key: str) -> None:
        # Taken before the first message is awaited, so no two streams take the last place.
        bound = cap.take(key, "")
        if bound is None:
            self._place = key
            return
        metrics.KEY_REFUSALS.labels(self._sessions.key_label(self._key), bound).inc()
        full = cap.refusal(bound)
        if full is not None:
            raise full
        exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
        raise StreamBroken(f"{exhausted.name}: {TOO_MANY_STREAMS}", status=exhausted)

    def _give_place(self) -> None:
        if self._place is not None and self._gate.cap is not None:
            self._gate.cap.give(self._place, "")
            self._place = None

    async def _first_in_time(self, read_first: FirstMessage) -> pb.ConverseRequest | None:
        """The first message, read within its deadline: shorter while places run short."""
        cap = self._gate.cap
        short = cap.short if cap is not None else None
        loop = asyncio.get_running_loop()
        started = loop.time()
        read = asyncio.ensure_future(read_first())
        shortage = asyncio.ensure_future(short.wait() if short is not None else asyncio.Future())
        try:
            await asyncio.wait(
                {read, shortage},
                timeout=FIRST_MESSAGE_TIMEOUT_S,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not read.done() and shortage.done():
                await asyncio.wait(
                    {read}, timeout=max(started + SHORT_FIRST_MESSAGE_S - loop.time(), 0)
                )
            if not read.done():
                raise StreamRefused(
                    Status.INVALID_ARGUMENT, "config_timeout", "no first message in time"
                )
            return read.result()
        finally:
            for waiting in (read, shortage):
                waiting.cancel()

    async def attach(
        self, first: pb.ConverseRequest | None, tell: Tell = told_nobody
    ) -> list[bytes] | None:
        """Opens or resumes the session the first message names (None: it was no
        ``ConverseRequest``); None once attached (:attr:`host` and :attr:`queue` set).

        Raises StreamRefused, counted and logged, when the stream is refused; returns the
        events to write before the stream ends when a resume found a gap (resync_required) or
        its session ended since (what the client missed, the ending included), and nothing
        when another stream took its wait for a place over. ``tell`` writes to the stream
        while it waits for a place (``session_queued``).
        """
        resume = first.resume_session if first and first.HasField("resume_session") else None
        try:
            if (refusal := first_message_refused(first)) is not None:
                raise refusal
            assert first is not None
            sessions = self._sessions
            if resume is None:
                self.host, self.queue = await sessions.open(first.open_session, self._key, tell)
            else:
                self.host, self.queue = await sessions.resume(resume, self._key, tell)
        except StreamRefused as refusal:
            self.refused(refusal, resume)
            raise
        except ResumeGap as gap:
            metrics.RESUMES.labels("gap").inc()
            return [gap.payload]
        except ResumeFoundEnded as ended:
            metrics.RESUMES.labels("ended").inc()
            return [payload for _, payload in ended.effects.sends]
        except WaitEnded:
            return []  # told session_replaced already
        return None

    def refused(self, refusal: StreamRefused, resume: pb.ResumeSession | None = None) -> None:
        """Counts and logs a refused stream (the transport's own refusals come here too)."""
        what = "resume" if resume is not None else "stream"
        # The codes are the server's own closed set (docs/protocol.md), never client text.
        metrics.STREAM_REFUSALS.labels(what, refusal.code).inc()
        metrics.KEY_REFUSALS.labels(self._sessions.key_label(self._key), refusal.code).inc()
        if resume is not None:
            metrics.RESUMES.labels("refused").inc()
        session_id = resume.session_id if resume is not None else ""
        self._sessions.refusals.refused(what, session_id, self._peer, refusal.code)

    async def command(
        self,
        request: pb.ConverseRequest | None,
        size: int,
        write: Callable[[bytes], Awaitable[None]] | None = None,
    ) -> float:
        """Hands one message of the attached stream to its session (None: it was no
        ``ConverseRequest``, answered with a typed error); ``size`` is its length on the wire
        (0: unknown). With ``write``, what the command made goes out through it at once.

        Returns how long the reader takes nothing more: the retry hint of a refusal for rate,
        so flow control pushes a flood back to its sender (0 almost always).
        """
        host, queue = self.host, self.queue
        assert host is not None and queue is not None
        pause_s = 0.0
        if write is not None:
            # What the command makes goes out through ``write`` right after: the writer task
            # is not woken for it (the flush, or the host before it waits, ends the hold).
            queue.reader_flushes = True
        try:
            if request is None:
                host.refuse(queue.generation, CommandError("invalid_message", NOT_A_REQUEST))
            else:
                # No coroutine of the host's unless the engine makes a command wait.
                pending = host.receive_now(queue.generation, request, size)
                if type(pending) is float:
                    pause_s = pending
                else:
                    pause_s = await cast(Awaitable[float], pending)
        except BaseException:
            queue.reader_done()
            raise
        if write is not None:
            await queue.flush(write)
        return pause_s

    def release(self) -> None:
        """The stream is gone: its session waits, detached, for a resume (or expires); its
        place in the cap goes back."""
        if self.host is not None and self.queue is not None:
            self._sessions.release(self.host, self.queue)
            self.host = None
        self._give_place()


__all__ = [
    "FIRST_MESSAGE_TIMEOUT_S",
    "SHORT_FIRST_MESSAGE_S",
    "SLOW_CONSUMER",
    "ServerStream",
    "StreamGate",
    "broken",
    "first_message_refused",
]
