"""One response of the embedded engine, from the user's words to paced, chunked speech.

A response waits for the transcripts of the turns it answers, asks the responder for text,
cuts the text into sentences as it streams, synthesizes each sentence while the next is
being written, and releases the audio in chunks of ``chunk_ms`` with the matching piece of
transcript. Output that a client can play is stamped with its start on the response's media
clock. In ``realtime`` pace, a chunk is released when the client would start to play it
(a little before, see :data:`LEAD_MS`), so the response stays active while it is heard and
speech from the user can still interrupt it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from omni_grpc import audio
from omni_grpc.engine.embedded.models import Runtime
from omni_grpc.engine.embedded.responder import Reply, Request, Responder, next_seed
from omni_grpc.engine.embedded.tts import OUTPUT_RATE_HZ, SentenceSplitter
from omni_grpc.engine.loopback.outbox import Outbox
from omni_grpc.engine.loopback.turns import Answer, split_words
from omni_grpc.wire import pb

# How far ahead of real time audio is released: enough to hide network jitter from the
# client's player, little enough that a barge-in finds most of the answer still unsent.
LEAD_MS = 300.0
DEFAULT_MAX_TOKENS = 160
DEFAULT_TEMPERATURE = 0.2
_SENTENCES_AHEAD = 2  # synthesized sentences waiting for their turn to play


@dataclass(slots=True)
class UserTurn:
    """A committed user item that no response has answered yet."""

    item_id: str
    previous_item_id: str
    audio: bytes = b""
    text: str = ""  # typed text, or the transcript once known
    transcribed: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(slots=True)
class Speech(Answer):
    """A response in flight: the loopback's ledger plus what a real answer needs."""

    inputs: list[UserTurn] = field(default_factory=list)
    auto: bool = False  # started by server VAD: noise alone turns into a listen
    instructions: str = ""
    voice: str = ""
    announced: bool = False  # response_created went out
    output_tokens: int = 0
    finish: str = "stop"
    first_token: float | None = None  # the responder's first piece, for the benchmark
    origin: float | None = None  # monotonic time at which media-clock 0 plays


class Performer:
    """Produces the events of one response into the session's outbox."""

    def __init__(self, runtime: Runtime, outbox: Outbox, *, realtime: bool) -> None:
        self._runtime = runtime
        self._outbox = outbox
        self._realtime = realtime
        self._chunk_bytes = runtime.options.chunk_ms * OUTPUT_RATE_HZ // 1000 * 2

    async def run(
        self,
        speech: Speech,
        responder: Responder,
        conversation: Callable[[], list[tuple[str, str]]],
        *,
        max_tokens: int,
        temperature: float,
    ) -> bool:
        """Plays ``speech``; False if it became a listen (VAD heard noise, not words)."""
        for turn in speech.inputs:
            await turn.transcribed.wait()
        if speech.auto and not any(turn.text.strip() for turn in speech.inputs):
            await self._outbox.put(
                pb.ConverseResponse(response_listen=pb.ResponseListen(reason="silence_or_noise"))
            )
            return False
        created = pb.Response(
            id=speech.id, status=pb.RESPONSE_STATUS_IN_PROGRESS, output_modalities=speech.modalities
        )
        await self._outbox.put(
            pb.ConverseResponse(
                response_created=pb.ResponseCreated(response=created, item_id=speech.item_id)
            )
        )
        speech.announced = True
        reply = responder.reply(
            Request(
                instructions=speech.instructions,
                turns=conversation(),
                max_tokens=max_tokens,
                temperature=temperature,
                seed=next_seed(),
            )
        )
        try:
            if speech.speaks:
                await self._speak(speech, reply)
            else:
                await self._write(speech, reply)
        finally:
            reply.stop()
            speech.output_tokens = reply.tokens
            speech.input_tokens = reply.prompt_tokens
            speech.finish = reply.finish
        return True

    async def _write(self, speech: Speech, reply: Reply) -> None:
        ids = {"response_id": speech.id, "item_id": speech.item_id}
        async for piece in reply.pieces:
            speech.first_token = speech.first_token or time.monotonic()
            await self._outbox.put(
                pb.ConverseResponse(output_text_delta=pb.OutputTextDelta(delta=piece, **ids))
            )
            speech.first_text = speech.first_text or time.monotonic()
            speech.sent_text += piece

    async def _speak(self, speech: Speech, reply: Reply) -> None:
        ready: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue(_SENTENCES_AHEAD)
        producer = asyncio.create_task(self._synthesize(speech, reply, ready))
        try:
            while (sentence := await ready.get()) is not None:
                await self._play(speech, *sentence)
            await producer  # re-raises a failure of the responder or of the synthesizer
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)

    async def _synthesize(
        self, speech: Speech, reply: Reply, ready: asyncio.Queue[tuple[str, bytes] | None]
    ) -> None:
        splitter = SentenceSplitter()
        async for piece in reply.pieces:
            speech.first_token = speech.first_token or time.monotonic()
            for sentence in splitter.push(piece):
                await ready.put(
                    (sentence, await self._runtime.tts.synthesize(sentence, speech.voice))
                )
        for sentence in splitter.flush():
            await ready.put((sentence, await self._runtime.tts.synthesize(sentence, speech.voice)))
        await ready.put(None)

    async def _play(self, speech: Speech, text: str, pcm: bytes) -> None:
        ids = {"response_id": speech.id, "item_id": speech.item_id}
        chunks = audio.chunk_pcm16(pcm, self._chunk_bytes) if pcm else []
        if not chunks:  # nothing to hear (punctuation alone): the text still counts
            await self._outbox.put(
                pb.ConverseResponse(
                    output_audio_transcript_delta=pb.OutputAudioTranscriptDelta(delta=text, **ids)
                )
            )
            speech.sent_text += text
            speech.marks.append((speech.sent_ms, len(speech.sent_text)))
            return
        for chunk, piece in zip(chunks, split_words(text, len(chunks)), strict=True):
            start_ms = speech.sent_ms
            length_ms = len(chunk) / 2 * 1000 / OUTPUT_RATE_HZ
            await self._pace(speech, start_ms)
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
            speech.first_audio = speech.first_audio or time.monotonic()
            speech.sent_ms = start_ms + length_ms
            await self._outbox.put(
                pb.ConverseResponse(
                    output_audio_transcript_delta=pb.OutputAudioTranscriptDelta(delta=piece, **ids)
                )
            )
            # No await since the last put: the ledger matches what was queued.
            speech.first_text = speech.first_text or time.monotonic()
            speech.sent_text += piece
            speech.marks.append((speech.sent_ms, len(speech.sent_text)))

    async def _pace(self, speech: Speech, start_ms: float) -> None:
        now = time.monotonic()
        if not self._realtime:
            await asyncio.sleep(0)  # still let a cancel in between chunks
            return
        if speech.origin is None or now > speech.origin + start_ms / 1000:
            # First audio, or synthesis fell behind playback: the client's player restarts
            # from this chunk, so the schedule does too.
            speech.origin = now - start_ms / 1000
        due = speech.origin + (start_ms - LEAD_MS) / 1000
        await asyncio.sleep(max(0.0, due - now))
