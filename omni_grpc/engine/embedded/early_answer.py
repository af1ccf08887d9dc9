"""An answer written ahead, at a pause that may end the turn.

Server VAD ends a turn only after ``silence_duration_ms`` of silence (500 ms by default), but
the engine starts transcribing at the first ~100 ms of it (a pause, :mod:`.turn_detection`).
When that transcript is ready while the silence lasts, the language model can already start
on the answer: if the turn then ends where the pause began and the conversation the response
reads is the one the early answer was asked, the response takes its text, so the prompt's
prefill and first tokens ran inside the silence instead of after it. The first phrase is
synthesized as soon as it is written, too, and the response's player finds its audio ready
(:meth:`EarlyAnswer.voice`): the player cuts the same text into the same phrases. Otherwise
(the user spoke on, or anything the answer reads changed) it is stopped and forgotten; what it
cost is model time on the worker threads, which had nothing else to do while the user was
silent.

Only an answer that nothing but text can come out of is written ahead: a session with tools
may get a function call instead, chosen at the response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from omni_grpc.engine.embedded.responder import Request, Responder, TextStream
from omni_grpc.engine.kit.tts import SentenceSplitter, Synthesizer


@dataclass(frozen=True, slots=True)
class Asked:
    """What an answer depends on: a request without its seed (a greedy answer ignores it, and
    a sampled one may take any)."""

    instructions: str
    turns: tuple[tuple[str, str], ...]
    max_tokens: int
    temperature: float
    tools: bool

    @classmethod
    def of(cls, request: Request) -> Asked:
        return cls(
            request.instructions,
            tuple(request.turns),
            request.max_tokens,
            request.temperature,
            request.tools,
        )


class EarlyAnswer:
    """A responder's stream, read into a buffer from now on; ``take`` hands it to a response."""

    def __init__(
        self,
        speech_end_ms: float,
        request: Request,
        responder: Responder,
        speaker: tuple[Synthesizer, str] | None,
    ) -> None:
        """``speaker``: the voice and voice name a spoken answer will be said with (None for
        one written only): its first phrase is synthesized ahead."""
        self.speech_end_ms = speech_end_ms  # the pause it was written at
        self.asked = Asked.of(request)
        self.responder = responder
        self.stream: TextStream = responder.reply(request)
        self._speaker = speaker
        self._first_phrase: tuple[str, asyncio.Task[bytes]] | None = None
        self._pieces: asyncio.Queue[str | None] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        splitter = SentenceSplitter(self._speaker[0].first_words) if self._speaker else None
        try:
            async for piece in self.stream.pieces:
                self._pieces.put_nowait(piece)
                if splitter is not None and self._first_phrase is None:
                    self._synthesize_first(splitter.push(piece))
        finally:
            self._pieces.put_nowait(None)

    def _synthesize_first(self, phrases: list[str]) -> None:
        if phrases and self._speaker is not None:
            tts, name = self._speaker
            self._first_phrase = (phrases[0], asyncio.create_task(tts.synthesize(phrases[0], name)))

    def voice(self, tts: Synthesizer) -> Synthesizer:
        """``tts``, but with the first phrase's audio made ahead, if it was."""
        return _Prepared(tts, self)

    def speaks_with(self, tts: Synthesizer) -> bool:
        return self._speaker is not None and self._speaker[0] is tts

    def first_phrase(self, text: str, voice: str) -> asyncio.Task[bytes] | None:
        """The synthesis of the first phrase if it is ``text`` in ``voice``, else None (and
        the synthesis made ahead is of no use: it stops)."""
        if self._first_phrase is None or self._speaker is None:
            return None
        phrase, synthesis = self._first_phrase
        if (phrase, self._speaker[1]) == (text, voice):
            return synthesis
        synthesis.cancel()
        return None

    def fits(self, request: Request, responder: Responder) -> bool:
        """Whether this is ``responder``'s answer to ``request``."""
        return responder is self.responder and Asked.of(request) == self.asked

    async def pieces(self) -> AsyncIterator[str]:
        """The answer's text: what was written ahead, then the rest as it comes."""
        try:
            while (piece := await self._pieces.get()) is not None:
                yield piece
            await self._reader  # re-raises a failure of the model
        finally:
            self._stop_writing()  # the first phrase's audio may still be wanted

    def stop(self) -> None:
        """Stops the model at its next token and the first phrase's synthesis; what was not
        read is dropped."""
        self._stop_writing()
        if self._first_phrase is not None:
            self._first_phrase[1].cancel()

    def _stop_writing(self) -> None:
        self.stream.stop()
        self._reader.cancel()


class _Prepared:
    """A voice that hands out the early answer's first phrase, made ahead, then synthesizes."""

    def __init__(self, tts: Synthesizer, early: EarlyAnswer) -> None:
        self.first_words = tts.first_words
        self._tts = tts
        self._early: EarlyAnswer | None = early if early.speaks_with(tts) else None

    async def synthesize(self, text: str, voice: str = "") -> bytes:
        # Only the first phrase can have been made ahead: it is asked for first. By then the
        # early answer has read (and cut) the piece that ends it, so it is there to be found.
        early, self._early = self._early, None
        ready = early.first_phrase(text, voice) if early is not None else None
        return await (ready or self._tts.synthesize(text, voice))
