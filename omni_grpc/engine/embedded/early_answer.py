"""An answer written ahead, at a pause that may end the turn.

Server VAD ends a turn only after ``silence_duration_ms`` of silence (500 ms by default), but
the engine starts transcribing at the first ~100 ms of it (a pause, :mod:`.turn_detection`).
When that transcript is ready while the silence lasts, the language model can already start
on the answer: if the turn then ends where the pause began and the conversation the response
reads is the one the early answer was asked, the response takes its text, so the prompt's
prefill and first tokens ran inside the silence instead of after it. Otherwise (the user spoke
on, or anything the answer reads changed) it is stopped and forgotten; what it cost is model
time on the worker threads that had nothing else to do while the user was silent.

Only an answer that nothing but text can come out of is written ahead: a session with tools
may get a function call instead, chosen at the response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from omni_grpc.engine.embedded.responder import Request, TextStream


@dataclass(frozen=True, slots=True)
class Asked:
    """What an answer depends on: a request without its seed (a greedy answer ignores it, and
    a sampled one may take any)."""

    instructions: str
    turns: tuple[tuple[str, str], ...]
    max_tokens: int
    temperature: float

    @classmethod
    def of(cls, request: Request) -> Asked:
        return cls(
            request.instructions, tuple(request.turns), request.max_tokens, request.temperature
        )


class EarlyAnswer:
    """A responder's stream, read into a buffer from now on; ``take`` hands it to a response."""

    def __init__(self, speech_end_ms: float, request: Request, stream: TextStream) -> None:
        self.speech_end_ms = speech_end_ms  # the pause it was written at
        self.asked = Asked.of(request)
        self.stream = stream
        self._pieces: asyncio.Queue[str | None] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for piece in self.stream.pieces:
                self._pieces.put_nowait(piece)
        finally:
            self._pieces.put_nowait(None)

    def fits(self, request: Request) -> bool:
        """Whether this is the answer to ``request``."""
        return Asked.of(request) == self.asked

    async def pieces(self) -> AsyncIterator[str]:
        """The answer's text: what was written ahead, then the rest as it comes."""
        try:
            while (piece := await self._pieces.get()) is not None:
                yield piece
            await self._reader  # re-raises a failure of the model
        finally:
            self.stop()

    def stop(self) -> None:
        """Stops the model at its next token; what was not read is dropped."""
        self.stream.stop()
        self._reader.cancel()
