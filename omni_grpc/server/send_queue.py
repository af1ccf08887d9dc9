"""The bounded queue of serialized events for one attached stream, and who writes them.

Two parties write a stream's events: its reader, at once, what its own command made (the fast
path: an echoed chunk goes out without a hop, see :meth:`SendQueue.flush`), and the writer task
the rest (engine output, backlog, the end). One write is in flight at a time, whoever makes it,
and events go out in the order they were queued. The writer task sleeps while the queue is
empty, and is woken on the loop's next turn after a put, not at once: by then the reader has
usually written what its command made, and the writer sleeps on instead of running a step per
chunk for nothing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from omni_grpc.core.budget import MemoryBudget

SEND_QUEUE_DEPTH = 2048  # events waiting for one stream's writer; beyond it the stream is cut


class SendQueue:
    """The bounded queue of serialized events for one attached stream, drained by its writer.

    It never blocks the session: when the stream's reader falls :data:`SEND_QUEUE_DEPTH` events
    behind, ``put`` refuses and the host cuts that stream (the journal keeps the events for a
    resume). ``end`` finishes the stream after what is already queued. Queued bytes count
    against the server's memory budget until they are taken for writing (or ``discard`` drops
    them when the stream is gone).
    """

    def __init__(
        self,
        generation: int,
        budget: MemoryBudget,
        barrier: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.generation = generation
        self._budget = budget
        # Awaited before each event goes out (durability sync: the store holds it first).
        self._barrier = barrier
        # Events, then None once the stream must finish (the end marker).
        self._items: deque[bytes | None] = deque()
        # What the writer task sleeps on while there is nothing to write; None while it works.
        self._waiter: asyncio.Future[None] | None = None
        self._wake_due = False  # a wake-up is scheduled for the loop's next turn
        self.end_reason: str | None = None
        # The only event still to go once the session moved to a peer (see ``move``).
        self._last_word: bytes | None = None
        # Set when the reader fell behind: the servicer ends the stream at once with a status.
        self.fell_behind = asyncio.Event()
        # True while an event is being written: the stream's reader writes what its own command
        # made (the fast path) and the writer task the rest, one at a time; nobody takes an
        # event while another is in flight, so they go out in the order they were queued.
        self.writing = False
        # What ``written`` waits on while a write is in flight (made only when someone waits).
        self._write_done: asyncio.Future[None] | None = None
        # True while the stream's reader carries out a command and will write what it made
        # itself (:meth:`flush`, right after): an event queued meanwhile leaves the sleeping
        # writer task be, instead of scheduling its wake-up for a write the flush makes idle.
        # The flush (or :meth:`reader_done`, should the reader wait before it) ends the hold.
        self.reader_flushes = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, payload: bytes) -> bool:
        """Queues one event; False when the stream's reader has fallen too far behind."""
        if self.end_reason is not None:
            return True  # the stream is finishing; nothing more goes on it
        if len(self._items) >= SEND_QUEUE_DEPTH:
            return False
        self._items.append(payload)
        self._budget.held += len(payload)
        if self._waiter is not None and not self._wake_due and not self.reader_flushes:
            self._wake_soon()
        return True

    def end(self, reason: str) -> None:
        """Finishes the stream after what is queued (the terminal event included)."""
        if self.end_reason is None:
            self.end_reason = reason
            self._items.append(None)
            self._wake_soon()

    def fall_behind(self) -> None:
        """The reader fell too far behind: the stream ends now, without writing what is queued.

        The servicer sees :attr:`fell_behind` and ends the call with RESOURCE_EXHAUSTED
        (``slow_consumer``); the queued events stay in the journal for a resume.
        """
        self.end("slow_consumer")
        self.fell_behind.set()

    def move(self, last_word: bytes) -> None:
        """A peer adopted the session while this replica stalled: what is queued is stale and
        dropped, ``last_word`` (going_away, session_moved) goes out alone, and the stream ends."""
        self.discard()  # the end marker too, if the stream was ending: put back below
        self._last_word = last_word
        self.end_reason = self.end_reason or "session_moved"
        self._items.append(None)
        self._wake_soon()

    async def flush(self, write: Callable[[bytes], Awaitable[None]]) -> None:
        """The reader's fast path: writes with ``write``, at once, the events queued now (what
        its command made), unless a write is in flight, the stream is ending, or a durability
        barrier must be waited for first; then it leaves them to the writer task, which is
        woken for them."""
        items = self._items
        if not items or self.writing or self.end_reason is not None or self._barrier:
            self.reader_done()
            return
        self.writing = True
        self.reader_flushes = False  # what is queued while this writes is the writer's
        try:
            for _ in range(len(items)):
                if not items or self.end_reason is not None:
                    break  # the stream began to end meanwhile: the writer task finishes it
                payload = items.popleft()
                assert payload is not None
                self._budget.held -= len(payload)
                await write(payload)
        finally:
            self._written()

    def reader_done(self) -> None:
        """Ends the reader's hold on the writer's wake-up (:attr:`reader_flushes`): what it
        leaves queued goes to the writer task."""
        self.reader_flushes = False
        if self._items and self._waiter is not None:
            self._wake_soon()

    async def write_out(self, write: Callable[[bytes], Awaitable[None]], payload: bytes) -> None:
        """Writes one event taken by :meth:`next`, as the one write in flight."""
        self.writing = True
        try:
            await write(payload)
        finally:
            self._written()

    def _written(self) -> None:
        self.writing = False
        if self._items and self._waiter is not None:
            self._wake_soon()  # queued while the write was in flight: the writer task's now
        if (done := self._write_done) is not None:
            self._write_done = None
            if not done.done():
                done.set_result(None)

    async def written(self) -> None:
        """Returns once no write is in flight."""
        while self.writing:
            if self._write_done is None:
                self._write_done = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._write_done)

    async def next(self) -> bytes | None:
        """The next event to write, or None once the stream must finish."""
        if self._last_word == b"":
            return None  # the last word went out: the stream is over
        while not self._items or self.writing:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        payload = self._items.popleft()
        if payload is not None:
            self._budget.held -= len(payload)
            if self._barrier is not None:
                await self._barrier()
        if self._last_word is not None:
            # Moved (even while the barrier waited): the stale copy's events never go out.
            payload, self._last_word = self._last_word, b""
        return payload

    def discard(self) -> None:
        """The stream is gone: what it never wrote leaves the budget (the journal keeps it)."""
        while self._items:
            if (payload := self._items.popleft()) is not None:
                self._budget.held -= len(payload)

    def _wake_soon(self) -> None:
        # On the loop's next turn: a reader that writes the event at once (``flush``) leaves
        # the sleeping writer nothing to do by then, and it is not woken at all.
        if self._waiter is not None and not self._wake_due:
            self._wake_due = True
            self._waiter.get_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_due = False
        waiter = self._waiter
        if self._items and not self.writing and waiter is not None and not waiter.done():
            waiter.set_result(None)


__all__ = ["SEND_QUEUE_DEPTH", "SendQueue"]
