"""One response of the vllm engine: vLLM's streamed text, written or spoken, into the outbox.

Text responses get one ``output_text_delta`` per vLLM delta. Spoken responses go through
the embedded engine's speech stage: the text is cut into sentences as it streams, each
sentence is synthesized by espeak-ng while the next is still being generated, and the audio
is released in chunks of ``chunk_ms``, each with its share of the sentence as transcript,
stamped on the response's media clock. In ``realtime`` pace a chunk is released a little
before the client would start to play it, so a response stays active while it is heard and
a barge-in finds most of it unsent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from omni_grpc import audio
from omni_grpc.engine.embedded.tts import OUTPUT_RATE_HZ, Espeak, SentenceSplitter
from omni_grpc.engine.loopback.outbox import Outbox
from omni_grpc.engine.loopback.turns import Answer, split_words
from omni_grpc.engine.vllm.options import VllmOptions
from omni_grpc.engine.vllm.runtime import Generation
from omni_grpc.wire import pb

# How far ahead of real time audio is released: enough to hide network jitter from the
# client's player, little enough that a barge-in finds most of the answer still unsent.
LEAD_MS = 300.0
_SENTENCES_AHEAD = 2  # synthesized sentences waiting for their turn to play

# vLLM's finish reasons -> (status, status_reason) of the response.
FINISHES: dict[str, tuple[pb.ResponseStatus.ValueType, str]] = {
    "stop": (pb.RESPONSE_STATUS_COMPLETED, "stop"),
    "length": (pb.RESPONSE_STATUS_INCOMPLETE, "max_output_tokens"),
    "abort": (pb.RESPONSE_STATUS_FAILED, "engine_aborted"),
}


@dataclass(slots=True)
class Reply(Answer):
    """A response in flight: the loopback's ledger plus the vLLM request behind it."""

    request_id: str = ""
    instructions: str = ""
    voice: str = ""
    output_tokens: int = 0
    finish: str = "stop"  # vLLM's finish reason once the request ended
    first_token: float | None = None
    origin: float | None = None  # monotonic time at which media-clock 0 plays


class Speaker:
    """Turns one vLLM generation into the events of one response."""

    def __init__(self, options: VllmOptions, tts: Espeak, outbox: Outbox) -> None:
        self._options = options
        self._tts = tts
        self._outbox = outbox
        self._chunk_bytes = options.chunk_ms * OUTPUT_RATE_HZ // 1000 * 2

    async def run(self, reply: Reply, generation: Generation) -> None:
        """Streams ``generation`` out as ``reply``; returns when the request has ended."""
        if reply.speaks:
            await self._speak(reply, generation)
        else:
            await self._write(reply, generation)

    async def _pieces(self, reply: Reply, generation: Generation) -> AsyncIterator[str]:
        """The text of each delta, in order; counts tokens and notes how the request ended."""
        async for delta in generation:
            reply.first_token = reply.first_token or time.monotonic()
            reply.output_tokens += len(delta.token_ids)
            reply.input_tokens = delta.prompt_tokens
            if delta.finish_reason is not None:
                reply.finish = delta.finish_reason
            if delta.text:
                yield delta.text

    async def _write(self, reply: Reply, generation: Generation) -> None:
        ids = {"response_id": reply.id, "item_id": reply.item_id}
        async for text in self._pieces(reply, generation):
            await self._outbox.put(
                pb.ConverseResponse(output_text_delta=pb.OutputTextDelta(delta=text, **ids))
            )
            reply.first_text = reply.first_text or time.monotonic()
            reply.sent_text += text

    async def _speak(self, reply: Reply, generation: Generation) -> None:
        ready: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue(_SENTENCES_AHEAD)
        producer = asyncio.create_task(self._synthesize(reply, generation, ready))
        try:
            while (sentence := await ready.get()) is not None:
                await self._play(reply, *sentence)
            await producer  # re-raises a failure of vLLM or of the synthesizer
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)

    async def _synthesize(
        self, reply: Reply, generation: Generation, ready: asyncio.Queue[tuple[str, bytes] | None]
    ) -> None:
        splitter = SentenceSplitter()
        async for text in self._pieces(reply, generation):
            for sentence in splitter.push(text):
                await ready.put((sentence, await self._tts.synthesize(sentence, reply.voice)))
        for sentence in splitter.flush():
            await ready.put((sentence, await self._tts.synthesize(sentence, reply.voice)))
        await ready.put(None)

    async def _play(self, reply: Reply, text: str, pcm: bytes) -> None:
        ids = {"response_id": reply.id, "item_id": reply.item_id}
        chunks = audio.chunk_pcm16(pcm, self._chunk_bytes) if pcm else []
        if not chunks:  # nothing to hear (punctuation alone): the text still counts
            await self._outbox.put(
                pb.ConverseResponse(
                    output_audio_transcript_delta=pb.OutputAudioTranscriptDelta(delta=text, **ids)
                )
            )
            reply.sent_text += text
            reply.marks.append((reply.sent_ms, len(reply.sent_text)))
            return
        for chunk, piece in zip(chunks, split_words(text, len(chunks)), strict=True):
            start_ms = reply.sent_ms
            length_ms = len(chunk) / 2 * 1000 / OUTPUT_RATE_HZ
            await self._pace(reply, start_ms)
            await self._outbox.put(
                pb.ConverseResponse(
                    output_audio_delta=pb.OutputAudioDelta(
                        audio=chunk,
                        encoding=pb.AUDIO_ENCODING_PCM16,
                        sample_rate_hz=OUTPUT_RATE_HZ,
                        start_ms=start_ms,
                        duration_ms=length_ms,
                        **ids,
                    )
                )
            )
            reply.first_audio = reply.first_audio or time.monotonic()
            reply.sent_ms = start_ms + length_ms
            await self._outbox.put(
                pb.ConverseResponse(
                    output_audio_transcript_delta=pb.OutputAudioTranscriptDelta(delta=piece, **ids)
                )
            )
            # No await since the last put: the ledger matches what was queued.
            reply.first_text = reply.first_text or time.monotonic()
            reply.sent_text += piece
            reply.marks.append((reply.sent_ms, len(reply.sent_text)))

    async def _pace(self, reply: Reply, start_ms: float) -> None:
        if self._options.pace == "fast":
            await asyncio.sleep(0)  # still let a cancel in between chunks
            return
        now = time.monotonic()
        speed = self._options.speed
        if reply.origin is None or now > reply.origin + start_ms / 1000 / speed:
            # First audio, or synthesis fell behind playback: the client's player restarts
            # from this chunk, so the schedule does too.
            reply.origin = now - start_ms / 1000 / speed
        due = reply.origin + (start_ms - LEAD_MS) / 1000 / speed
        await asyncio.sleep(max(0.0, due - now))
