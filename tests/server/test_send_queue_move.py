"""A stream whose session a peer adopted while this replica stalled (SendQueue.move): what it
had queued is stale and never goes out, not even the event its writer already took and holds at
the durability barrier; the last word (going_away, session_moved) goes alone, then the end."""

from __future__ import annotations

import asyncio

from omni_grpc.core.budget import MemoryBudget
from omni_grpc.server.host import SendQueue


async def test_a_moved_stream_sends_only_its_last_word() -> None:
    budget = MemoryBudget(1 << 20)
    released = asyncio.Event()

    async def barrier() -> None:  # the store has not said it holds the event yet
        await released.wait()

    queue = SendQueue(1, budget, barrier)
    assert queue.put(b"stale-1") and queue.put(b"stale-2")
    writer = asyncio.create_task(queue.next())  # takes stale-1, waits at the barrier
    await asyncio.sleep(0)
    queue.move(b"moved")
    released.set()  # the write was refused: the waiters are let go
    assert await writer == b"moved"
    assert await queue.next() is None
    assert queue.end_reason == "session_moved"
    assert queue.put(b"later")  # taken and dropped: the stream is finishing
    assert budget.held == 0  # nothing queued is still charged


async def test_a_stream_already_ending_still_ends_after_the_move() -> None:
    queue = SendQueue(1, MemoryBudget(1 << 20))
    queue.put(b"session_ended event")
    queue.end("session_ended")
    queue.move(b"moved")
    assert await queue.next() == b"moved"
    assert await asyncio.wait_for(queue.next(), 1) is None
