"""What the embedded engine says: a deterministic echo, or SmolLM2 writing an answer.

A responder turns the conversation into a stream of text pieces. The engine speaks the
pieces sentence by sentence as they come, so a responder should yield early and often.
:class:`EchoResponder` answers "You said: <what the user said>." and is what the tests use;
:class:`SmolResponder` runs the language model in a worker thread and hands its tokens to
the event loop as they are sampled.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
import threading
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass, field

from omni_grpc.engine.embedded.models.lm import GenerationStats, SmolLM

# The prompt and sampling were chosen on a set of short questions (scripts/lm_questions.py; the
# scores in docs/engines.md): asking for English stops SmolLM2 from answering "the capital of
# Spain" in Spanish, and three worked examples show it the shape of a spoken answer (the fact,
# in a sentence). Commands and requests were then added (scripts/bench_answers.py,
# docs/measurements/2026-12-07-assistant-answers.md): with examples of questions alone the
# model repeated "Turn on the lights." back or refused "as a text-based AI"; two examples of a
# short decline show it that shape, and "from here" keeps it from claiming the thing is done.
# The declines end at their sentence: a longer example taught the model to go on with false
# claims ("...; the front door is locked"). They go before the conversation only under these
# default instructions. A response that may call functions can act: it is asked as before,
# with the spoken style and the worked questions alone (ACTING_INSTRUCTIONS).
ACTING_INSTRUCTIONS = (
    "You are a friendly voice assistant. Your answers are spoken aloud, so answer in English "
    "in one or two short, plain sentences, without lists or markdown."
)
DEFAULT_INSTRUCTIONS = (
    f"{ACTING_INSTRUCTIONS} You cannot control devices or book, buy, call or send anything: "
    "when asked to, say in one short sentence that you can't do that from here. Otherwise "
    "gladly answer questions, explain things and chat."
)
QUESTION_EXAMPLES = (
    ("user", "What is the capital of Portugal?"),
    ("assistant", "The capital of Portugal is Lisbon."),
    ("user", "What is six plus three?"),
    ("assistant", "Six plus three is nine."),
    ("user", "How do I keep bread fresh?"),
    (
        "assistant",
        "Keep it in a paper bag or a bread box at room temperature, and freeze what you will "
        "not eat within a few days.",
    ),
)
EXAMPLES = (
    *QUESTION_EXAMPLES,
    ("user", "Turn on the kitchen lights."),
    ("assistant", "Sorry, I can't control the kitchen lights from here."),
    ("user", "Thanks, that was helpful."),
    ("assistant", "You're welcome, glad I could help!"),
    ("user", "Can you book a hotel room for Friday?"),
    ("assistant", "Sorry, I can't book hotel rooms from here."),
)
# The tokens of conversation an answer reads under auto truncation when the session sets no
# post_instructions limit: the oldest items are dropped past it (engine.kit.truncation). Less
# than SmolLM2's context on purpose: a 135M model reads a long history poorly, and each token
# of it is computed on the CPU when the prompt's start changes. About the twelve short turns
# the engine used to keep.
CONVERSATION_TOKENS = 512
# Turns whose token counts the responder keeps (a conversation holds at most 64 items, and
# sessions share the responder).
COUNTS_KEPT = 4096
# Sampling when the session sets neither max_output_tokens nor temperature. Greedy scored
# best (sampling at 0.2 lost a question, at 0.6 five); an answer ends after MAX_SENTENCES
# sentences, which also stops the rambling a greedy small model falls into.
DEFAULT_MAX_TOKENS = 160
DEFAULT_TEMPERATURE = 0.0
MAX_SENTENCES = 2
# A sentence that says the assistant cannot do what was asked is the whole answer: what the
# model adds after one is an example's words ("...I can't book a hotel room for Friday.").
DECLINE = re.compile(r"\b(can'?t|cannot|unable)\b", re.IGNORECASE)
# A sentence ends at . ! or ? (closing quotes and brackets kept) before white space: "3.5" and
# "e.g.," go on.
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s)")


@dataclass(frozen=True, slots=True)
class Request:
    """One response to write."""

    instructions: str
    # (role, text) pairs, oldest first; role is "user" or "assistant"; the last is the user's.
    turns: list[tuple[str, str]]
    max_tokens: int
    temperature: float
    seed: int
    idle: bool = False  # an idle prompt: nothing was said, the answer checks in
    tools: bool = False  # the response may call functions (the default prompt lets it act)


@dataclass(slots=True)
class TextStream:
    """An answer being written: iterate ``pieces``; afterwards ``finish`` says why it stopped."""

    pieces: AsyncIterator[str]
    finish: str = "stop"  # or "max_output_tokens"
    tokens: int = 0
    prompt_tokens: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def stop(self) -> None:
        """Asks the producer to stop at its next token."""
        self._stop.set()


# The answer to an idle prompt (the user stayed silent; the session committed the silence and
# asked for a response). SmolLM2-135M, asked to check in with a quiet user, repeats its last
# answer or apologizes, so the engine checks in with these words (the echo responder's).
STILL_THERE = "Are you still there?"


class Responder:
    """The interface: ``reply`` starts writing an answer to ``request``."""

    name = "responder"

    def reply(self, request: Request) -> TextStream:
        raise NotImplementedError

    def count(self, role: str, text: str) -> int:
        """The tokens a turn of ``role`` saying ``text`` takes in a prompt: a word a token,
        unless the responder has a tokenizer."""
        return len(text.split())

    def window(self, instructions: str, tools: bool, max_tokens: int) -> int | None:
        """The tokens the conversation may take in a prompt under ``instructions`` that leaves
        room for ``max_tokens`` of answer; None: no bound (the echo reads one turn)."""
        return None


class EchoResponder(Responder):
    """Repeats the user's last turn: deterministic, instant, and checkable by ear."""

    name = "echo"

    def reply(self, request: Request) -> TextStream:
        said = next((text.strip() for role, text in reversed(request.turns) if role == "user"), "")
        text = f"You said: {said.rstrip('.!?')}." if said else "I did not catch that."
        if request.idle:
            text = STILL_THERE
        words = text.split(" ")
        reply = TextStream(
            pieces=_aiter([]), prompt_tokens=sum(len(t.split()) for _, t in request.turns)
        )
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
        budget = max(request.max_tokens, 1)
        if len(pieces) > budget:
            pieces, reply.finish = pieces[:budget], "max_output_tokens"
        reply.tokens = len(pieces)
        # All at once: the text is ready, and one piece lets the speaker cut it at sentences.
        reply.pieces = _aiter(["".join(pieces)])
        return reply


class SmolResponder(Responder):
    """SmolLM2-135M-Instruct, sampled in a worker thread, streamed token by token."""

    name = "smollm2"

    def __init__(self, model: SmolLM, executor: Executor) -> None:
        self._model = model
        self._executor = executor
        # Every response counts the whole history again: its turns' counts are kept.
        self._counted = functools.lru_cache(maxsize=COUNTS_KEPT)(self._tokens_of)

    def warm_up(self) -> None:
        """Computes a first turn's prompt into each of the model's caches: pays the first
        call's costs and leaves the default system prompt and examples there, so that no
        session's first turn waits for them."""
        self._model.prefill(self._prompt("", [("user", "Hello.")]))

    def _prompt(
        self, instructions: str, turns: list[tuple[str, str]], tools: bool = False
    ) -> list[int]:
        """The prompt of ``turns``, which the session has cut to what fits (``window``)."""
        if instructions and instructions != DEFAULT_INSTRUCTIONS:
            return self._model.chat_prompt(instructions, turns)
        if tools:
            return self._model.chat_prompt(ACTING_INSTRUCTIONS, [*QUESTION_EXAMPLES, *turns])
        return self._model.chat_prompt(DEFAULT_INSTRUCTIONS, [*EXAMPLES, *turns])

    def count(self, role: str, text: str) -> int:
        """The tokens of the turn in ChatML, as ``chat_prompt`` writes it."""
        return self._counted(role, text)

    def _tokens_of(self, role: str, text: str) -> int:
        return len(self._model.tokenizer.encode(f"<|im_start|>{role}\n{text}<|im_end|>\n").ids)

    def window(self, instructions: str, tools: bool, max_tokens: int) -> int | None:
        """SmolLM2's context less the prompt without turns (instructions, worked examples,
        the answer's opening) and ``max_tokens``."""
        frame = len(self._prompt(instructions, [], tools))
        return max(self._model.max_context - max_tokens - frame, 0)

    def reply(self, request: Request) -> TextStream:
        prompt = self._prompt(request.instructions, request.turns, request.tools)
        reply = TextStream(pieces=_aiter([]), prompt_tokens=len(prompt))
        reply.pieces = self._stream(reply, prompt, request)
        return reply

    async def _stream(
        self, reply: TextStream, prompt: list[int], request: Request
    ) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        # Bounded by max_tokens: the thread never produces more pieces than that.
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        def produce() -> None:
            stats = GenerationStats()
            sentences = SentenceLimit(MAX_SENTENCES, last=DECLINE)
            try:
                for piece in self._model.generate(
                    prompt,
                    max_tokens=request.max_tokens,
                    temperature=request.temperature,
                    seed=request.seed,
                    cancelled=lambda: reply._stop.is_set() or sentences.reached,
                    stats=stats,
                ):
                    kept = sentences.take(piece)
                    if kept:
                        loop.call_soon_threadsafe(queue.put_nowait, kept)
            finally:
                reply.tokens = stats.tokens
                reply.finish = "stop" if sentences.reached else stats.finish or "stop"
                loop.call_soon_threadsafe(queue.put_nowait, None)

        job = loop.run_in_executor(self._executor, produce)
        try:
            while (piece := await queue.get()) is not None:
                yield piece
            await job  # re-raises a failure of the model
        finally:
            reply.stop()  # a cancelled response stops the thread at its next token


class SentenceLimit:
    """Passes text on until ``limit`` sentences are complete, or one that matches ``last``,
    then nothing more.

    A sentence is complete when white space follows its closing mark, so the piece that
    starts the next one is cut there (its first word is never spoken).
    """

    def __init__(self, limit: int, last: re.Pattern[str] | None = None) -> None:
        self._limit = limit
        self._last = last
        self._text = ""
        self.reached = False

    def take(self, piece: str) -> str:
        """The part of ``piece`` within the limit ("" once it is reached)."""
        if self.reached:
            return ""
        start = len(self._text)
        self._text += piece
        begin = 0
        for count, end in enumerate(_SENTENCE_END.finditer(self._text), 1):
            closes = self._last is not None and self._last.search(self._text[begin : end.end()])
            if count == self._limit or closes:
                self.reached = True
                return self._text[start : end.end()]
            begin = end.end()
        return piece


async def _aiter(pieces: list[str]) -> AsyncIterator[str]:
    for piece in pieces:
        yield piece


_seeds = itertools.count(1)


def next_seed() -> int:
    """A fresh sampling seed per response, so replies vary but runs can be replayed."""
    return next(_seeds)
