"""A session's bounded queue of output events, from which a response's unread output can be
taken back."""

from __future__ import annotations

import asyncio
import collections

from omni_grpc.wire import pb
from omni_grpc.wire.kinds import RESPONSE_OUTPUT_EVENTS


class EventQueue:
    """A bounded FIFO of events with one reader.

    ``put`` waits while the queue is full, which holds producers back when the reader is slow;
    ``get`` returns None once the queue is ended and empty. A cancel calls :meth:`take_back`
    so that audio the reader has not taken yet never follows the cancel.
    """

    def __init__(self, capacity: int) -> None:
        self._items: collections.deque[pb.ConverseResponse] = collections.deque()
        # The events not read yet, for a truth test with no call (the engine's fast path asks
        # it per chunk): the queue's own deque, only ever changed in place; never change it.
        self.unread = self._items
        self._capacity = capacity
        self._ended = False
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    def __len__(self) -> int:
        return len(self._items)

    def _update(self) -> None:
        readable = self._ended or bool(self._items)
        writable = self._ended or len(self._items) < self._capacity
        for flag, ready in ((self._readable, readable), (self._writable, writable)):
            if ready:
                flag.set()
            else:
                flag.clear()

    async def put(self, event: pb.ConverseResponse) -> None:
        """Appends ``event``, waiting for room; drops it if the queue has ended."""
        while not self._ended and len(self._items) >= self._capacity:
            await self._writable.wait()
        if not self._ended:
            self._items.append(event)
            self._update()

    async def get(self) -> pb.ConverseResponse | None:
        """The next event, or None once the queue has ended and is empty."""
        while not self._items and not self._ended:
            await self._readable.wait()
        if not self._items:
            return None
        event = self._items.popleft()
        self._update()
        return event

    def take_back(self, response_id: str) -> list[pb.ConverseResponse]:
        """Removes and returns the unread output events of one response, in order."""
        kept = []
        taken = []
        for event in self._items:
            # Which output event it is, if one (a cancel's rare path: asked field by field).
            names = (field.name for field, _ in event.ListFields())
            kind = next((name for name in names if name in RESPONSE_OUTPUT_EVENTS), None)
            if kind is not None and getattr(event, kind).response_id == response_id:
                taken.append(event)
            else:
                kept.append(event)
        self._items.clear()  # in place: ``unread`` is this deque
        self._items.extend(kept)
        self._update()
        return taken

    def end(self, *, drop: bool) -> None:
        """Accepts nothing more; the reader drains what is left, unless ``drop``."""
        self._ended = True
        if drop:
            self._items.clear()
        self._update()
