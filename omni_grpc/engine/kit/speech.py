"""The speech player: one response's sentences in, paced chunks of audio with their words out.

A spoken response goes out in chunks of ``chunk_ms``, each an ``output_audio_delta`` stamped
with its start on the response's media clock and followed by the ``output_audio_transcript_delta``
of its share of the sentence's words (cut at word boundaries), so that a truncate can cut the
transcript where the audio was cut. Streamed text is cut into sentences as it comes and each
is synthesized while the next is still being written (:meth:`SpeechPlayer.speak`).

Pacing (:class:`Pacing`): in ``realtime`` a chunk is released ``lead_ms`` before the client
would start to play it, so a response stays active while it is heard and a barge-in finds
most of it unsent; a negative lead releases a chunk only after its audio would have been
generated in real time. If output falls behind (synthesis is slow, or the reader is), the
client's player restarts from the late chunk, so the schedule does too. Otherwise (``fast``)
chunks go out as fast as the reader takes them, still letting commands in between.

The player updates the answer's ledger right after each put, with no await in between, so
the ledger always matches what was queued.

Held (the answer's :class:`~.answers.Hold`, paused while speech over the reply is judged), the
player waits before its next chunk. Released with a point of the media clock before what it
had sent (where the listener stopped hearing), it first sends the audio from that point again,
without its words (the transcript is append-only and already has them), then goes on; the
schedule restarts there. So it keeps the last :data:`REPLAY_MS` of what it sent.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from dataclasses import dataclass

from omni_grpc import audio
from omni_grpc.engine.kit.answers import Answer, split_words
from omni_grpc.engine.kit.clock import MONOTONIC, Clock
from omni_grpc.engine.kit.event_queue import EventQueue
from omni_grpc.engine.kit.tts import SentenceSplitter, Synthesizer
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_OUTPUT_RATE_HZ, pcm16_bytes, pcm16_ms

# How far ahead of real time audio is released: enough to hide network jitter from the
# client's player, little enough that a barge-in finds most of the answer still unsent.
LEAD_MS = 300.0
_SENTENCES_AHEAD = 2  # synthesized sentences waiting for their turn to play
# Audio kept for a replay after a pause: far more than a client buffers ahead of what it plays
# (LEAD_MS and its jitter buffer), bounded so that a long reply does not keep all of itself.
REPLAY_MS = 10_000.0


def audio_delta(
    audio_out: bytes, start_ms: float, *, response_id: str, item_id: str = ""
) -> pb.ConverseResponse:
    """An ``output_audio_delta`` of canonical output audio starting at ``start_ms`` on the
    response's media clock."""
    delta = pb.OutputAudioDelta(
        audio=audio_out,
        encoding=pb.AUDIO_ENCODING_PCM16,
        sample_rate_hz=CANONICAL_OUTPUT_RATE_HZ,
        start_ms=start_ms,
        duration_ms=pcm16_ms(len(audio_out), CANONICAL_OUTPUT_RATE_HZ),
        response_id=response_id,
        item_id=item_id,
    )
    return pb.ConverseResponse(output_audio_delta=delta)


@dataclass(frozen=True, slots=True)
class Pacing:
    """When chunks are released; see the module docstring."""

    realtime: bool
    speed: float = 1.0  # divides the real-time schedule
    lead_ms: float = LEAD_MS
    clock: Clock = MONOTONIC  # the session's: what the schedule and the latencies are read on


class SpeechPlayer:
    """Plays the output of one answer into the session's event queue."""

    def __init__(
        self, events: EventQueue, answer: Answer, *, chunk_ms: int, pacing: Pacing
    ) -> None:
        self._events = events
        self._answer = answer
        self._chunk_bytes = pcm16_bytes(chunk_ms, CANONICAL_OUTPUT_RATE_HZ)
        self._pacing = pacing
        self._clock = pacing.clock
        self._origin: float | None = None  # the clock's time at which media-clock 0 plays
        self._clock_ms = 0.0  # the media clock at the end of what was released
        self._sent: collections.deque[tuple[float, bytes]] = collections.deque()  # for replays
        answer.settle = self.settle

    async def write(self, pieces: AsyncIterator[str]) -> None:
        """A text response: one ``output_text_delta`` per piece, as the pieces come."""
        answer = self._answer
        ids = {"response_id": answer.id, "item_id": answer.item_id}
        async for piece in pieces:
            await self._events.put(
                pb.ConverseResponse(output_text_delta=pb.OutputTextDelta(delta=piece, **ids))
            )
            answer.first_text = answer.first_text or self._clock.now()
            answer.sent_text += piece

    async def speak(self, pieces: AsyncIterator[str], tts: Synthesizer, voice: str) -> None:
        """A spoken response: the pieces cut into sentences, each synthesized while the one
        before plays."""
        ready: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue(_SENTENCES_AHEAD)
        producer = asyncio.create_task(self._synthesize(pieces, tts, voice, ready))
        try:
            while (sentence := await ready.get()) is not None:
                await self.say(*sentence)
            await producer  # re-raises a failure of the model or of the synthesizer
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)

    async def _synthesize(
        self,
        pieces: AsyncIterator[str],
        tts: Synthesizer,
        voice: str,
        ready: asyncio.Queue[tuple[str, bytes] | None],
    ) -> None:
        splitter = SentenceSplitter(tts.first_words)
        async for piece in pieces:
            for sentence in splitter.push(piece):
                await ready.put((sentence, await tts.synthesize(sentence, voice)))
        for sentence in splitter.flush():
            await ready.put((sentence, await tts.synthesize(sentence, voice)))
        await ready.put(None)

    async def say(self, text: str, pcm: bytes) -> None:
        """Plays one sentence: its audio in chunks, each with its share of ``text``.

        A response that does not speak gets the words alone, as ``output_text_delta``, on
        the same schedule.
        """
        answer = self._answer
        ids = {"response_id": answer.id, "item_id": answer.item_id}
        chunks = audio.chunk_pcm16(pcm, self._chunk_bytes) if pcm else []
        if not chunks:  # nothing to hear (punctuation alone): the text still counts
            await self._events.put(self._words(text, ids))
            answer.sent_text += text
            answer.marks.append((answer.sent_ms, len(answer.sent_text)))
            return
        for chunk, piece in zip(chunks, split_words(text, len(chunks)), strict=True):
            start_ms = self._clock_ms
            end_ms = start_ms + pcm16_ms(len(chunk), CANONICAL_OUTPUT_RATE_HZ)
            await self._wait_until_due(start_ms)
            if answer.hold.held:  # checked after the wait: no await between it and the put
                await self.settle()
                await self._wait_until_due(start_ms)
            if answer.speaks:
                await self._events.put(audio_delta(chunk, start_ms, **ids))
                answer.first_audio = answer.first_audio or self._clock.now()
                answer.sent_ms = end_ms
                self._keep(start_ms, chunk)
            self._clock_ms = end_ms
            await self._events.put(self._words(piece, ids))
            answer.first_text = answer.first_text or self._clock.now()
            answer.sent_text += piece
            answer.marks.append((end_ms, len(answer.sent_text)))

    async def settle(self) -> None:
        """Waits while the answer is held; after a release that goes back, sends the audio
        from there again (see the module docstring)."""
        if not self._answer.hold.held:
            return
        resume_at = await self._answer.hold.wait()
        self._origin = None  # the listener's player starts again from the next chunk
        if resume_at is not None and resume_at < self._clock_ms:
            await self._replay(resume_at)

    async def _replay(self, from_ms: float) -> None:
        answer = self._answer
        ids = {"response_id": answer.id, "item_id": answer.item_id}
        bytes_per_ms = pcm16_bytes(1, CANONICAL_OUTPUT_RATE_HZ)
        for start_ms, chunk in list(self._sent):
            end_ms = start_ms + pcm16_ms(len(chunk), CANONICAL_OUTPUT_RATE_HZ)
            if end_ms <= from_ms:
                continue
            if start_ms < from_ms:  # from the very sample the listener stopped at
                skip = round((from_ms - start_ms) * bytes_per_ms) // 2 * 2
                chunk, start_ms = chunk[skip:], start_ms + pcm16_ms(skip, CANONICAL_OUTPUT_RATE_HZ)
            await self._wait_until_due(start_ms)
            await self._events.put(audio_delta(chunk, start_ms, **ids))

    def _keep(self, start_ms: float, chunk: bytes) -> None:
        self._sent.append((start_ms, chunk))
        while self._sent and self._sent[0][0] < self._clock_ms - REPLAY_MS:
            self._sent.popleft()

    def _words(self, text: str, ids: dict[str, str]) -> pb.ConverseResponse:
        if self._answer.speaks:
            delta = pb.OutputAudioTranscriptDelta(delta=text, **ids)
            return pb.ConverseResponse(output_audio_transcript_delta=delta)
        return pb.ConverseResponse(output_text_delta=pb.OutputTextDelta(delta=text, **ids))

    async def _wait_until_due(self, start_ms: float) -> None:
        pacing = self._pacing
        if not pacing.realtime:
            await asyncio.sleep(0)  # still let commands (a cancel) in between chunks
            return
        now = self._clock.now()
        # Late: past the time the client would play the chunk, or past its release time.
        late_ms = max(start_ms, start_ms - pacing.lead_ms)
        if self._origin is None or now > self._origin + late_ms / 1000 / pacing.speed:
            # First audio, or output fell behind: the schedule restarts from this chunk.
            self._origin = now - start_ms / 1000 / pacing.speed
        due = self._origin + (start_ms - pacing.lead_ms) / 1000 / pacing.speed
        await self._clock.sleep(max(0.0, due - now))
