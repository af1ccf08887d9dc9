"""When a stream's writer task wakes (SendQueue): on the loop's next turn after a put, and only
if the event is still queued then. An event the stream's reader wrote at once (the fast path,
``flush``) leaves the writer asleep; one nobody took reaches the writer, in order, and so does
the end; and one queued while a write is in flight waits for it, then goes in order. While the
reader holds the wake-up (it writes what its command makes right after), a put schedules none;
the flush, or the reader's giving up the hold before it waits, hands what is left to the writer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from omni_grpc.core.budget import MemoryBudget
from omni_grpc.server.send_queue import SendQueue


def _queue() -> SendQueue:
    return SendQueue(1, MemoryBudget(1 << 20))


class Written:
    """A stream's write: what went out, in order."""

    def __init__(self) -> None:
        self.payloads: list[bytes] = []

    async def __call__(self, payload: bytes) -> None:
        self.payloads.append(payload)


async def _turns(count: int = 3) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_an_event_the_reader_takes_at_once_does_not_wake_the_writer() -> None:
    queue = _queue()
    writer = asyncio.create_task(queue.next())
    await _turns()  # the writer sleeps on the empty queue
    asleep_on = queue._waiter
    assert asleep_on is not None
    written = Written()
    for _ in range(3):
        assert queue.put(b"echo")
        await queue.flush(written)  # the reader writes it itself
        assert written.payloads[-1] == b"echo" and len(queue) == 0
        await _turns()
        # Never woken: it still sleeps on the very future it went to sleep on.
        assert not writer.done() and queue._waiter is asleep_on and not asleep_on.done()
    assert queue.put(b"left for the writer")
    await _turns()
    assert writer.done() and writer.result() == b"left for the writer"


async def test_events_nobody_took_reach_the_writer_in_order_then_the_end() -> None:
    queue = _queue()
    writer = asyncio.create_task(queue.next())
    await _turns()
    assert queue.put(b"1") and queue.put(b"2")
    queue.end("session_closed")
    written = Written()
    await queue.flush(written)
    assert written.payloads == []  # ending: everything goes through the writer
    assert await asyncio.wait_for(writer, 1) == b"1"
    assert await queue.next() == b"2"
    assert await queue.next() is None
    assert len(queue) == 0


async def test_a_writer_cancelled_while_asleep_leaves_the_queue_usable() -> None:
    queue = _queue()
    writer = asyncio.create_task(queue.next())
    await _turns()
    assert queue.put(b"first")
    writer.cancel()  # before its wake-up ran: the wake-up finds no one and does nothing
    await _turns()
    assert writer.cancelled()
    assert await asyncio.wait_for(queue.next(), 1) == b"first"


async def test_an_event_queued_during_a_write_waits_for_it_and_goes_in_order() -> None:
    queue = _queue()
    writer = asyncio.create_task(queue.next())
    await _turns()
    release = asyncio.Event()
    out: list[bytes] = []

    async def slow(payload: bytes) -> None:  # a write that waits for the client to read
        out.append(payload)
        await release.wait()

    assert queue.put(b"1")
    flushing = asyncio.create_task(queue.flush(slow))
    await _turns()
    assert queue.writing and out == [b"1"]
    assert queue.put(b"2")  # made by the engine meanwhile
    await _turns()
    assert not writer.done()  # not while the write is in flight: order first
    release.set()
    await flushing
    assert await asyncio.wait_for(writer, 1) == b"2"  # then the writer task takes it
    await queue.write_out(slow, b"2")
    assert out == [b"1", b"2"]


async def test_a_put_while_the_reader_holds_the_wake_up_schedules_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = _queue()
    writer = asyncio.create_task(queue.next())
    await _turns()
    loop = asyncio.get_running_loop()
    scheduled: list[object] = []
    call_soon = loop.call_soon

    def counted(callback: Any, *args: Any, **kwargs: Any) -> asyncio.Handle:
        scheduled.append(callback)
        return call_soon(callback, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(loop, "call_soon", counted)
        queue.reader_flushes = True  # the reader carries out a command (ServerStream.command)
        assert queue.put(b"echo")
        written = Written()
        await queue.flush(written)
        assert written.payloads == [b"echo"] and not queue.reader_flushes
        assert scheduled == []  # no wake-up was even scheduled for the writer
    assert queue.put(b"left for the writer")  # the hold is over: the writer is woken
    assert await asyncio.wait_for(writer, 1) == b"left for the writer"


async def test_what_the_reader_leaves_when_it_waits_reaches_the_writer() -> None:
    queue = _queue()
    writer = asyncio.create_task(queue.next())
    await _turns()
    queue.reader_flushes = True
    assert queue.put(b"made before the reader waits")
    await _turns()
    assert not writer.done()  # held for the reader's flush
    queue.reader_done()  # the reader waits (for room in the engine's mailbox) instead
    assert await asyncio.wait_for(writer, 1) == b"made before the reader waits"
    assert not queue.reader_flushes


async def test_a_flush_that_cannot_write_hands_the_held_events_to_the_writer() -> None:
    held = asyncio.Event()

    async def barrier() -> None:  # durability: the store must hold each event first
        await held.wait()

    queue = SendQueue(1, MemoryBudget(1 << 20), barrier)
    writer = asyncio.create_task(queue.next())
    await _turns()
    queue.reader_flushes = True
    assert queue.put(b"behind the barrier")
    written = Written()
    await queue.flush(written)
    assert written.payloads == [] and not queue.reader_flushes  # the writer's, after all
    held.set()
    assert await asyncio.wait_for(writer, 1) == b"behind the barrier"
