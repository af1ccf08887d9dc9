"""The speech player held while speech over a reply is judged, and resumed from where the
listener stopped hearing it: nothing heard twice, nothing lost."""

from __future__ import annotations

import asyncio

import numpy as np

from omni_grpc.engine.kit import Answer, EventQueue, Pacing, SpeechPlayer
from omni_grpc.wire import pb

OUT_RATE = 24000
BYTES_PER_MS = 48


def tone(ms: int) -> bytes:
    """Audio whose every sample says where it is (a ramp), so a replay can be checked."""
    samples = np.arange(ms * OUT_RATE // 1000) % 30000
    return samples.astype("<i2").tobytes()


def deltas(events: list[pb.ConverseResponse]) -> list[pb.OutputAudioDelta]:
    return [e.output_audio_delta for e in events if e.HasField("output_audio_delta")]


async def drain(queue: EventQueue, until: int) -> list[pb.ConverseResponse]:
    got = []
    while len(got) < until:
        event = await asyncio.wait_for(queue.get(), 2)
        assert event is not None
        got.append(event)
    return got


def answer() -> Answer:
    return Answer(id="resp_1", item_id="item_1", turn_started=0.0, modalities=(pb.MODALITY_AUDIO,))


async def test_a_held_reply_waits_and_resumes_from_the_point_it_is_released_at() -> None:
    queue, reply = EventQueue(256), answer()
    player = SpeechPlayer(queue, reply, chunk_ms=100, pacing=Pacing(realtime=False))
    pcm = tone(1000)
    reply.hold.pause()
    speaking = asyncio.create_task(player.say("one two three four five", pcm))
    await asyncio.sleep(0.05)
    assert len(queue) == 0 and not speaking.done()  # held before its first chunk
    reply.hold.release(0.0)
    await speaking
    sent = deltas(await drain(queue, 20))
    assert [d.start_ms for d in sent] == [100.0 * k for k in range(10)]


async def test_a_release_before_what_was_sent_replays_it_once_without_its_words() -> None:
    queue, reply = EventQueue(256), answer()
    player = SpeechPlayer(queue, reply, chunk_ms=100, pacing=Pacing(realtime=False))
    pcm = tone(1000)
    await player.say("one two three four", pcm[: 400 * BYTES_PER_MS])
    first = await drain(queue, 8)
    assert reply.sent_ms == 400.0
    # Speech over the reply: held; the listener had heard 250 ms of it, and says so.
    reply.hold.pause()
    rest = asyncio.create_task(player.say("five six", pcm[400 * BYTES_PER_MS :]))
    await asyncio.sleep(0.05)
    reply.hold.release(250.0)
    await rest
    after = await drain(queue, len(queue))
    replayed = deltas(after)[:2]
    assert [(d.start_ms, d.duration_ms) for d in replayed] == [(250.0, 50.0), (300.0, 100.0)]
    # The replayed audio is exactly what was sent there before, from the very sample.
    sent_before = b"".join(d.audio for d in deltas(first))
    assert b"".join(d.audio for d in replayed) == sent_before[250 * BYTES_PER_MS :]
    # Its words are not sent again: the transcript stays append-only and whole.
    words = "".join(
        e.output_audio_transcript_delta.delta
        for e in first + after
        if e.HasField("output_audio_transcript_delta")
    )
    assert words == "one two three fourfive six"
    # What a listener plays (everything up to 250 ms, then from the replay on) is the reply,
    # once: no gap, no repeat.
    heard = sent_before[: 250 * BYTES_PER_MS] + b"".join(d.audio for d in deltas(after))
    assert heard == pcm
    assert reply.sent_ms == 1000.0


async def test_settle_holds_the_end_of_a_reply_until_it_is_released() -> None:
    queue, reply = EventQueue(256), answer()
    player = SpeechPlayer(queue, reply, chunk_ms=100, pacing=Pacing(realtime=False))
    await player.say("all of it", tone(300))
    await drain(queue, 6)
    reply.hold.pause()
    assert reply.settle is not None
    settling = asyncio.create_task(reply.settle())
    await asyncio.sleep(0.05)
    assert not settling.done()  # the response is not done while its last words are held
    reply.hold.release(100.0)
    await settling
    assert [d.start_ms for d in deltas(await drain(queue, 2))] == [100.0, 200.0]
