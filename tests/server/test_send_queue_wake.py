"""When a stream's writer task wakes (SendQueue): on the loop's next turn after a put, and only
if the event is still queued then. An event the stream's reader took at once (the fast path)
leaves the writer asleep; one nobody took reaches the writer, in order, and so does the end."""

from __future__ import annotations

import asyncio

from omni_grpc.core.budget import MemoryBudget
from omni_grpc.server.send_queue import SendQueue


def _queue() -> SendQueue:
    return SendQueue(1, MemoryBudget(1 << 20))


async def _turns(count: int = 3) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_an_event_the_reader_takes_at_once_does_not_wake_the_writer() -> None:
    queue = _queue()
    writer = asyncio.create_task(queue.next())
    await _turns()  # the writer sleeps on the empty queue
    asleep_on = queue._waiter
    assert asleep_on is not None
    for _ in range(3):
        assert queue.put(b"echo")
        assert queue.take_now() == b"echo"  # the reader writes it itself
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
    assert queue.take_now() is None  # ending: everything goes through the writer
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
