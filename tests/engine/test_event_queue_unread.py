"""``EventQueue.unread``, which the engine's fast path tests per chunk instead of calling
``len``, is the queue's own deque through every change: puts, reads, a cancel's take-back and
the end."""

from __future__ import annotations

from omni_grpc.engine.kit.event_queue import EventQueue
from omni_grpc.wire import pb


def _delta(response_id: str) -> pb.ConverseResponse:
    return pb.ConverseResponse(output_audio_delta=pb.OutputAudioDelta(response_id=response_id))


async def test_unread_follows_the_queue_through_a_take_back_and_the_end() -> None:
    events = EventQueue(8)
    unread = events.unread
    assert not unread
    for response_id in ("a", "b", "a"):
        await events.put(_delta(response_id))
    assert len(unread) == 3
    assert [event.output_audio_delta.response_id for event in events.take_back("a")] == ["a", "a"]
    assert events.unread is unread and len(unread) == len(events) == 1
    assert (await events.get()) == _delta("b")
    assert not unread and len(events) == 0
    await events.put(_delta("c"))
    events.end(drop=True)
    assert events.unread is unread and not unread
