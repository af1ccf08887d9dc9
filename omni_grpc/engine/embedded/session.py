"""One embedded conversation: the kit's listening session, hearing through Silero, Whisper and
SmolLM2's judgement of a turn's end, and answering through a responder and espeak-ng.

The kit's :class:`~omni_grpc.engine.kit.ListeningSession` has server VAD and the turn-taking
(the end of a turn, speech over a reply, idle prompts). What is the embedded engine's own is
what it hears and how it answers: at a pause that may end the turn it starts transcribing it
(and, while the silence lasts, writing the answer: :mod:`.early_answer`); Smart Turn judges the
sound of the turn for its end and SmolLM2 that transcript (:mod:`.end_of_turn`); the words of
speech over a reply are a quick greedy decode of it; while the user speaks, partial transcripts
(:mod:`.partials`); each committed turn is written down on the model threads.

A response waits for the transcripts of the turns it answers, then asks the responder for text
and speaks it sentence by sentence while the rest is being written (the kit's
:class:`~omni_grpc.engine.kit.SpeechPlayer`). A detected turn in which nobody said a word
(noise) becomes a ``response_listen`` instead of a response.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from omni_grpc.core.commands import UpdateSession
from omni_grpc.core.errors import CommandError
from omni_grpc.engine import kit
from omni_grpc.engine.embedded.early_answer import EarlyAnswer
from omni_grpc.engine.embedded.options import PACES, RESPONDERS
from omni_grpc.engine.embedded.partials import StableWords
from omni_grpc.engine.embedded.responder import (
    CONVERSATION_TOKENS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    Request,
    next_seed,
)
from omni_grpc.engine.embedded.runtime import Runtime
from omni_grpc.engine.embedded.tool_calls import choose_call
from omni_grpc.engine.kit.listening import Pause, SpeechStart, Turn
from omni_grpc.engine.kit.listening_session import Hearing, ListeningSession
from omni_grpc.engine.kit.tools import emit_call
from omni_grpc.engine.kit.transcripts import transcript_event, transcription_failed
from omni_grpc.engine.kit.truncation import ContextTooLong
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

_SESSION_OPTIONS = ("responder", "pace")
# A vLLM-Omni client's model options (the bridge's vLLM-Omni dialect passes its extra_body and
# ref_audio on under these names, whatever the engine): nothing here reads them, and they are
# no mistake of the client's, so they are not reported.
_FOREIGN_OPTIONS = ("extra_body", "ref_audio")


class EmbeddedSession(ListeningSession):
    """One conversation with the embedded engine; see the module docstring."""

    engine_name = "embedded"
    announce_at_start = False  # a response is announced once the words it answers are known

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        runtime: Runtime,
        on_close: Callable[[EmbeddedSession], None],
    ) -> None:
        options = runtime.options
        hearing = Hearing(runtime.vad, runtime.vad_executor, runtime.turn_scorer, runtime.turn_ear)
        super().__init__(session_id, config, options, on_close, hearing)
        self._runtime = runtime
        self._last_turn: kit.UserInput | None = None
        # A transcription started at a pause: where the speech paused, and the job (its text is
        # also the words the end of the turn is judged on, under semantic detection).
        self._guess: tuple[float, asyncio.Future[str]] | None = None
        # The answer to that transcript, started while the silence lasts (.early_answer).
        self._early: EarlyAnswer | None = None
        # Partial transcripts of the turn in progress: its words sent so far, where on the
        # input clock the last partial decode began, and whether one runs now.
        self._words = StableWords()
        self._partial_at_ms = 0.0
        self._partial_running = False
        self._responder, self._realtime, self._problem = self._session_options(config)

    async def _on_open(self) -> None:
        if self._problem is not None:
            await self._events.put(pb.ConverseResponse(error=self._problem.to_error()))

    def _session_options(self, config: pb.SessionConfig) -> tuple[str, bool, CommandError | None]:
        options = {key: str(value) for key, value in config.engine_options.items()}
        defaults = self._runtime.options
        responder = options.get("responder", defaults.responder)
        pace = options.get("pace", defaults.pace)
        problem = None
        unknown = sorted(set(options) - set(_SESSION_OPTIONS) - set(_FOREIGN_OPTIONS))
        if unknown or responder not in RESPONDERS or pace not in PACES:
            problem = CommandError(
                "invalid_session_config",
                "engine_options takes responder (auto, echo, "
                "smollm2) and pace (realtime, fast); the engine's defaults apply",
                param="engine_options",
            )
            responder, pace = defaults.responder, defaults.pace
        if responder == "smollm2" and self._runtime.smol is None:
            problem = CommandError(
                "invalid_session_config",
                "SmolLM2 is not installed on this server; answering with echo",
                param="engine_options",
            )
        return responder, pace == "realtime", problem

    def _update(self, update: UpdateSession) -> None:
        super()._update(update)
        self._responder, self._realtime, problem = self._session_options(self.config)
        if problem is not None:
            raise problem

    # -- hearing (the kit's hooks) ---------------------------------------------------------

    def _on_speech_started(self, start: SpeechStart) -> None:
        self._words, self._partial_at_ms = StableWords(), start.start_ms

    def _paused(self, pause: Pause) -> None:
        self._speculate(pause)

    def _pause_words(self, pause: Pause) -> Awaitable[str] | None:
        guess = self._guess
        if guess is None or guess[0] != pause.speech_end_ms:
            return None  # the last pause's transcription still runs: none for this one
        return guess[1]

    def _overlap_words(self, audio: bytes) -> Awaitable[str]:
        loop = asyncio.get_running_loop()
        reader = self._runtime.overlap_reader
        return loop.run_in_executor(self._runtime.executor, reader.hypothesis, audio)

    def _heard_audio(self) -> None:
        if self._early is not None and self._listener.speaking and not self._in_silence():
            self._drop_early()  # the user spoke on: the turn did not end at that pause
        self._partial_due()

    def _forget_speech(self) -> None:
        self._guess = None
        self._drop_early()

    async def _heard_turn(
        self, user: kit.UserInput, item: pb.ConversationItem, turn: Turn, detected: bool
    ) -> None:
        """Has the turn written down: from the transcription started at its pause, if it
        ended there."""
        guess, self._guess = self._guess, None
        job = guess[1] if guess is not None and guess[0] == turn.speech_end_ms else None
        if detected and self._early is not None and self._early.speech_end_ms != turn.speech_end_ms:
            self._drop_early()
        self._spawn(self._transcribe(user, self._last_turn, job if detected else None))
        self._last_turn = user

    async def _heard_item(self, user: kit.UserInput, item: pb.ConversationItem) -> None:
        """A user item created with its audio is written down as a committed turn is (in
        order with the turns), unless the client gave its transcript."""
        if user.text:
            await super()._heard_item(user, item)
            return
        await self._events.put(
            pb.ConverseResponse(
                item_added=pb.ItemAdded(item=item, previous_item_id=user.previous_item_id)
            )
        )
        user.text_final.clear()
        self._spawn(self._transcribe(user, self._last_turn, None))
        self._last_turn = user

    def _in_silence(self) -> bool:
        return self._listener.detector.in_silence

    def _partial_due(self) -> None:
        """Starts a partial decode of the turn so far when enough new speech came since the
        last one: one at a time, and none while speech is on hold (the turn may be ending,
        and the final transcription must not wait behind a partial)."""
        options, listener = self._runtime.options, self._listener
        start = listener.speech_start_ms
        if (
            options.partial_transcripts == "off"
            or start is None
            or self._partial_running
            or listener.detector.in_silence
            or listener.buffer.clock_ms - self._partial_at_ms < options.partial_every_ms
        ):
            return
        self._partial_at_ms = listener.buffer.clock_ms
        self._partial_running = True
        audio = listener.buffer.peek(start - listener.prefix_ms)
        self._spawn(self._partial(self._speech_item, audio))

    async def _partial(self, item_id: str, audio: bytes) -> None:
        """Decodes the turn so far and sends the words that became stable, if the turn is
        still being spoken (once it ends, its transcription says what was said); speech over
        a reply is judged on them too."""
        loop = asyncio.get_running_loop()
        try:
            language = self.config.input_transcription.language
            hypothesis = await loop.run_in_executor(
                self._runtime.executor, self._runtime.asr.hypothesis, audio, language
            )
        except Exception:
            logger.exception("session %s: partial failed", self.id, extra={"session_id": self.id})
            return
        finally:
            self._partial_running = False
        if item_id != self._speech_item or not self._listener.speaking:
            return  # the turn ended, or its speech was dropped (a clear, a barge-in)
        overlap = self._overlap
        if overlap is not None and overlap.item_id == item_id:
            await self._post(lambda: self._overlap_heard(overlap, hypothesis, None))
        delta = self._words.delta(hypothesis)
        if delta:
            event = pb.InputTranscriptionDelta(item_id=item_id, content_index=0, delta=delta)
            await self._events.put(pb.ConverseResponse(input_transcription_delta=event))

    def _speculate(self, pause: Pause) -> None:
        """Starts transcribing at a pause, so a turn that ends there has its words sooner.

        One guess at a time: if speech goes on and pauses again while the last guess still
        runs, the new pause waits for the real end of the turn instead.

        Under semantic detection the words judged are this transcript too. A greedy reading
        decoded first, for a sooner judgement, was tried and dropped: on the set's complete
        requests it misheard one in two ("what is the capital and friends", "harmony arms in
        arena club"), so the answer written on it was thrown away at the transcript half the
        time, and its decode and that answer held the beam back on two cores
        (docs/measurements/2026-12-07-words-judged-on-the-transcript.md).
        """
        if self._guess is not None and not self._guess[1].done():
            return
        loop = asyncio.get_running_loop()
        likeliest: asyncio.Future[str] = loop.create_future()

        def tell(text: str) -> None:  # on the model thread, while the job goes on
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(_settle, likeliest, text)

        transcribe = self._transcription()
        job = loop.run_in_executor(
            self._runtime.executor, lambda: transcribe(pause.audio, first_reading=tell)
        )
        job.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._guess = (pause.speech_end_ms, job)
        if self._runtime.options.answer_at_pause == "on":
            self._spawn(self._answer_early(pause.speech_end_ms, likeliest, job))

    async def _answer_early(
        self, speech_end_ms: float, first: asyncio.Future[str], job: asyncio.Future[str]
    ) -> None:
        """Starts the answer to the transcript guessed at a pause, if the silence still lasts
        when it is ready and the turn's response would be a language model's text.

        The answer starts on the ``first`` reading the transcription tells: Whisper's
        likeliest where the language model re-ranks the beam (the reranker weighs the others
        on the other model thread). Most turns keep that reading, and one that does not is
        answered again on the transcript (the response takes only an answer asked with its own
        transcript), unless that first answer was dropped meanwhile: the user spoke on.
        """
        early = None
        try:
            await asyncio.wait((first, job), return_when=asyncio.FIRST_COMPLETED)
            if first.done() and self._start_early(speech_end_ms, first.result()):
                early = self._early
            text = await job
        except Exception:
            return  # the turn's own transcription reports it
        finally:
            first.cancel()
        if early is None or (self._early is early and early.asked.turns[-1] != ("user", text)):
            self._start_early(speech_end_ms, text)

    def _start_early(self, speech_end_ms: float, text: str) -> bool:
        """Starts an early answer to ``text``, replacing any other; whether it did."""
        responder = self._runtime.responder(self._responder)
        guess = self._guess
        if (
            not text.strip()
            or responder is self._runtime.echo
            or guess is None
            or guess[0] != speech_end_ms  # the turn ended already, or speech went on
            or not self._in_silence()
            or self._active is not None
            or not self._creates_response()
            or self.config.tools.tools
        ):
            return False
        turns = self._ahead(text)
        if turns is None:
            return False
        request = self._request(self._default_instructions(), turns)
        self._drop_early()
        options = self._runtime.options
        speaks = pb.MODALITY_AUDIO in self._modalities()
        speaker = (self._runtime.tts, self.config.voice or options.voice) if speaks else None
        self._early = EarlyAnswer(speech_end_ms, request, responder, speaker)
        return True

    def _drop_early(self) -> None:
        if self._early is not None:
            self._early.stop()
            self._early = None

    async def _transcribe(
        self, user: kit.UserInput, before: kit.UserInput | None, job: asyncio.Future[str] | None
    ) -> None:
        """Writes down a turn (or takes the transcript started at its pause)."""
        loop = asyncio.get_running_loop()
        failure: Exception | None = None
        try:
            text = await (
                job
                or loop.run_in_executor(self._runtime.executor, self._transcription(), user.audio)
            )
        except Exception as error:
            logger.exception(
                "session %s: transcription failed", self.id, extra={"session_id": self.id}
            )
            text, failure = "", error
        logprobs = await self._logprobs(user.audio, text) if failure is None else []
        if before is not None:  # transcripts come out in the order the turns were committed
            await before.text_final.wait()
        user.text = text
        if user.item_id in self._history:
            item = self._history.get(user.item_id)
            item.content[0].transcript = text
            await self._events.put(
                transcription_failed(user.item_id, failure)
                if failure is not None
                else transcript_event(user.item_id, text, logprobs)
            )
            await self._events.put(
                pb.ConverseResponse(
                    item_done=pb.ItemDone(item=item, previous_item_id=user.previous_item_id)
                )
            )
        user.text_final.set()

    async def _logprobs(self, audio: bytes, text: str) -> list[pb.TranscriptLogprob]:
        """The logprobs of a turn's transcript, when the session asked for them."""
        if not self.config.transcription_logprobs or not text:
            return []
        settings = self.config.input_transcription
        runtime = self._runtime

        def read() -> list[tuple[str, float]]:
            asr = runtime.transcriber(settings.model)
            return asr.token_logprobs(audio, text, settings.language)

        try:
            tokens = await asyncio.get_running_loop().run_in_executor(runtime.executor, read)
        except Exception:
            logger.exception("session %s: logprobs failed", self.id, extra={"session_id": self.id})
            return []
        return [
            pb.TranscriptLogprob(token=token, logprob=logprob, bytes=token.encode())
            for token, logprob in tokens
        ]

    def _transcription(self) -> Callable[..., str]:
        """How this session's turns are written down, as its settings are now: their Whisper
        (loaded at its first turn when it is not the default), language and prompt. Blocks:
        for a model thread."""
        settings = self.config.input_transcription
        model, language, prompt = settings.model, settings.language, settings.prompt
        runtime = self._runtime

        def transcribe(audio: bytes, first_reading: Callable[[str], None] | None = None) -> str:
            return runtime.transcriber(model).transcribe(
                audio, first_reading=first_reading, language=language, prompt=prompt
            )

        return transcribe

    async def _on_close_begin(self) -> None:
        self._drop_early()

    # -- responses -----------------------------------------------------------------------

    async def _play(self, answer: kit.Answer) -> kit.Outcome | None:
        for user in answer.inputs:
            await user.text_final.wait()
        if answer.by_server_vad and not any(user.text.strip() for user in answer.inputs):
            listen = pb.ResponseListen(reason="silence_or_noise")
            await self._events.put(pb.ConverseResponse(response_listen=listen))
            return None
        await self._announce_response(answer)
        # A function call is the whole response; its output gets the next one (tool_calls).
        scripted = self._runtime.responder(self._responder) is self._runtime.echo
        writer = None if scripted else self._runtime.calls
        executor = self._runtime.executor
        turns = self._conversation(answer)
        call = await choose_call(answer, writer, turns, executor, next_seed())
        if call is not None:
            await emit_call(self._events, answer, *call)
            return pb.RESPONSE_STATUS_COMPLETED, "stop"
        options = self._runtime.options
        request = self._request(answer.instructions, turns, answer.max_output_tokens)
        request = dataclasses.replace(request, tools=bool(answer.tools.tools))
        early = None
        if answer.context is None and not answer.out_of_band:  # the early answer is the turn's
            early, self._early = self._early, None
        responder, tts = self._runtime.responder(self._responder), self._runtime.tts
        if answer.inputs and all(user.idle for user in answer.inputs):
            request = dataclasses.replace(request, idle=True)  # a check-in (responder.py)
            responder = self._runtime.echo
        if early is not None and early.fits(request, responder):
            stream, pieces, tts = early.stream, early.pieces(), early.voice(tts)
        else:
            if early is not None:
                early.stop()
            stream = responder.reply(request)
            pieces = stream.pieces
        player = kit.SpeechPlayer(
            self._events, answer, chunk_ms=options.chunk_ms, pacing=kit.Pacing(self._realtime)
        )
        if self.on_stage is not None:
            pieces = _first_told(pieces, self.on_stage, answer.id)
        try:
            if answer.speaks:
                await player.speak(pieces, tts, answer.voice or options.voice)
            else:
                await player.write(pieces)
        finally:
            stream.stop()
            answer.output_tokens = stream.tokens
            answer.input_tokens = stream.prompt_tokens
        incomplete = stream.finish == "max_output_tokens"
        status = pb.RESPONSE_STATUS_INCOMPLETE if incomplete else pb.RESPONSE_STATUS_COMPLETED
        return status, stream.finish

    def _max_tokens(self, cap: int | None) -> int:
        """The tokens an answer may write: a response's own ``cap``, else the session's."""
        if cap is not None:
            return cap
        config = self.config
        return (
            config.max_output_tokens if config.HasField("max_output_tokens") else DEFAULT_MAX_TOKENS
        )

    def _count_tokens(self, item: pb.ConversationItem, text: str) -> int:
        """The tokens of an item's turn in the responder's prompt (none for a wordless one,
        which the prompt leaves out)."""
        if not text:
            return 0
        role = "assistant" if item.role == pb.ITEM_ROLE_ASSISTANT else "user"
        return self._runtime.responder(self._responder).count(role, text)

    def _context_window(self, answer: kit.Answer) -> int | None:
        return self._window(answer.instructions, bool(answer.tools.tools), answer.max_output_tokens)

    def _window(self, instructions: str, tools: bool, cap: int | None) -> int | None:
        """The responder's window for the conversation, within CONVERSATION_TOKENS unless the
        session sets its own post_instructions limit."""
        responder = self._runtime.responder(self._responder)
        window = responder.window(instructions, tools, self._max_tokens(cap))
        if window is None or self.config.truncation.HasField("post_instructions_token_limit"):
            return window
        return min(window, CONVERSATION_TOKENS)

    def _request(
        self, instructions: str, turns: list[tuple[str, str]], max_tokens: int | None = None
    ) -> Request:
        """What the responder is asked, under the session's sampling settings; ``max_tokens``:
        a response's own cap, which stands in for the session's."""
        config = self.config
        max_tokens = self._max_tokens(max_tokens)
        temperature = config.temperature if config.HasField("temperature") else DEFAULT_TEMPERATURE
        return Request(
            instructions=instructions,
            turns=turns,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=next_seed(),
        )

    def _conversation(self, answer: kit.Answer | None = None) -> list[tuple[str, str]]:
        """What ``answer`` reads, as the responder reads it: the history cut to what fits (or
        its own input), (role, text), oldest first, wordless items left out; without an
        answer, the whole history."""
        return _turns(self._heard() if answer is None else self._read(answer))

    def _ahead(self, text: str) -> list[tuple[str, str]] | None:
        """The turns a response to the user's ``text`` (not in the history yet) would read
        under the session's truncation, for an early answer; None where it would not fit."""
        heard = [*self._heard(), (pb.ConversationItem(role=pb.ITEM_ROLE_USER), text)]
        try:
            reading = self._reading(heard, self._window(self._default_instructions(), False, None))
        except ContextTooLong:
            return None
        return _turns(heard[reading.first :])


def _turns(read: list[tuple[pb.ConversationItem, str]]) -> list[tuple[str, str]]:
    """Items with their words as (role, text) turns, wordless ones left out."""
    return [
        ("assistant" if item.role == pb.ITEM_ROLE_ASSISTANT else "user", text)
        for item, text in read
        if text
    ]


async def _first_told(
    pieces: AsyncIterator[str], on_stage: Callable[[str, str], None], response_id: str
) -> AsyncIterator[str]:
    """Passes the responder's pieces on, telling ``on_stage`` when the first one comes."""
    told = False
    async for piece in pieces:
        if not told:
            on_stage("first_token", response_id)
            told = True
        yield piece


def _settle(future: asyncio.Future[str], value: str) -> None:
    if not future.done():
        future.set_result(value)
