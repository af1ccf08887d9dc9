"""The listening session: a conversation session that hears speech itself and takes turns.

What a :class:`ListeningSession` adds to the kit's conversation session, for any engine that
has a voice activity detector (Silero, :mod:`.vad`):

* **Server VAD.** Each append is scored on the VAD thread (:mod:`.listening`); the session
  reports ``speech_started`` and ``speech_stopped`` and commits the turns it detects. Without
  it (turn detection NONE) the client commits, from the same buffer.
* **The end of a turn.** After ``silence_duration_ms`` (SERVER_VAD), or under SEMANTIC_VAD after
  the wait that the judgement of each pause chose (:mod:`.end_of_turn`: the sound of the turn
  judged at once, its words once they are written; each judgement is a ``turn_end_decision``).
* **Speech over a reply** (:mod:`.overlap_session`, which this class builds on): OpenAI's
  behaviour by default, the reply ends at the speech's onset; with the interruption settings
  it is held, judged, and ended or resumed. A reply that a false interruption resumes can be
  held on less: while one plays, speech starts after ``overlap_min_speech_ms`` (the reply stops
  that much sooner) and its pauses are heard after ``overlap_pause_ms`` of silence (its words,
  and so a resume, come that much sooner); a cough that the shorter bar lets through is
  resumed, as any false interruption is.
* **Idle prompts** (:mod:`.idle`).

Every decision runs on the worker. Background work (the words of a pause, their judgement)
hands its result back with ``_post``, and everything timed runs on the input audio clock, so
the session's behaviour is a function of the audio it was given.

An engine supplies what it hears with (all optional): ``scorer``, its judge of words, and
``ear``, its judge of the sound of speech; hooks for
what it does at a pause (:meth:`_paused`: transcribe early), the words of a pause
(:meth:`_pause_words`) and of speech over a reply (:meth:`_overlap_words`), what becomes of a
committed turn (:meth:`_heard_turn`: transcribe it), and what it does after each append or when
speech is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Protocol, Self

from omni_grpc.core import commands as cmd
from omni_grpc.core.errors import CommandError
from omni_grpc.engine.kit.answers import Answer, Outcome, UserInput, new_id
from omni_grpc.engine.kit.conversation import (
    SessionOptions,
    assert_canonical_input,
)
from omni_grpc.engine.kit.end_of_turn import Judgement, SoundScorer, TurnEndTimer, TurnScorer
from omni_grpc.engine.kit.idle import IdleTimer, heard_by
from omni_grpc.engine.kit.listening import Listener, Pause, SpeechStart, Turn
from omni_grpc.engine.kit.overlap import Rules
from omni_grpc.engine.kit.overlap_session import OverlapSession
from omni_grpc.engine.kit.turn_detection import PAUSE_MS
from omni_grpc.engine.kit.vad import SileroVad
from omni_grpc.engine.kit.worker import Handlers
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)


class ListeningOptions(SessionOptions, Protocol):
    """What the listening session reads of an engine's options, beyond the kit's."""

    @property
    def min_speech_ms(self) -> float:
        """Speech shorter than this never starts a turn."""

    @property
    def overlap_min_speech_ms(self) -> float:
        """The same, for speech over a reply that is held while it is judged."""

    @property
    def overlap_pause_ms(self) -> float:
        """The silence after which speech over a held reply counts as paused (its words are
        then read, and the reply may resume)."""


@dataclass(slots=True)
class Hearing:
    """What an engine hears with: the detector, its thread, and (optionally) judges of words
    and of sound, run on that thread (their work comes at pauses, while the detector has
    little to do)."""

    vad: SileroVad
    executor: Executor
    scorer: TurnScorer | None = None
    ear: SoundScorer | None = None


class ListeningSession(OverlapSession):
    """A conversation session with server VAD and turn-taking; see the module docstring."""

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        options: ListeningOptions,
        on_close: Callable[[Self], None],
        hearing: Hearing,
    ) -> None:
        super().__init__(session_id, config, options, on_close)
        self._hearing = hearing
        max_turn_ms = options.max_input_s * 1000
        self._listener = Listener(
            hearing.vad, config.turn_detection, options.min_speech_ms, max_turn_ms
        )
        # The detector's bars, (min_speech_ms, pause_ms): for turns, and over a held reply.
        self._turn_bars = (options.min_speech_ms, PAUSE_MS)
        self._held_bars = (options.overlap_min_speech_ms, options.overlap_pause_ms)
        self._holds_replies = False  # speech over a reply holds it (the interruption rules)
        self._speech_item = ""  # the user item that detected speech will become
        self._turn_end: TurnEndTimer | None = None
        self._idle = IdleTimer(0.0)
        self._configure_turns()

    def _command_handlers(self) -> Handlers:
        return {
            **super()._command_handlers(),
            cmd.UpdateSession: self._update,
            cmd.AppendAudio: self._hear,
            cmd.CommitAudio: self._commit,
        }

    # -- what an engine adds (see the module docstring) -----------------------------------

    def _on_speech_started(self, start: SpeechStart) -> None:
        """Speech began (a new turn, or speech over a reply)."""

    def _paused(self, pause: Pause) -> None:
        """Speech paused and the turn may be over (not called for speech over a reply)."""

    def _pause_words(self, pause: Pause) -> Awaitable[str] | None:
        """The words of the turn up to ``pause``, for the judgement of its end; None: none."""
        return None

    def _heard_audio(self) -> None:
        """Runs after each append has been heard."""

    async def _heard_turn(
        self, user: UserInput, item: pb.ConversationItem, turn: Turn, detected: bool
    ) -> None:
        """A committed turn (``detected``: ended by turn detection, not a client commit); by
        default its item is done at once (no words to wait for)."""
        await self._events.put(
            pb.ConverseResponse(
                item_done=pb.ItemDone(item=item, previous_item_id=user.previous_item_id)
            )
        )
        user.text_final.set()

    # -- configuration ---------------------------------------------------------------------

    def _vad(self) -> bool:
        return self.config.turn_detection.type in (
            pb.TURN_DETECTION_TYPE_SERVER_VAD,
            pb.TURN_DETECTION_TYPE_SEMANTIC_VAD,
        )

    def _configure_turns(self) -> None:
        detection = self.config.turn_detection
        semantic = detection.type == pb.TURN_DETECTION_TYPE_SEMANTIC_VAD
        self._turn_end = TurnEndTimer(detection.eagerness) if semantic else None
        self._idle.timeout_ms = float(detection.idle_timeout_ms)
        if not detection.idle_timeout_ms:
            self._idle.stop()
        rules = Rules.of(self.config)
        self._holds_replies = rules.barge_in and rules.resume

    def _update(self, update: cmd.UpdateSession) -> None:
        was_vad = self._vad()
        self.config = update.config
        self._listener.configure(self.config.turn_detection)
        self._configure_turns()
        if was_vad and not self._vad() and self._listener.speaking:
            self._listener.detector.reset()  # the client commits from now on
            self._listener.speech_start_ms = None

    # -- input -------------------------------------------------------------------------------

    async def _hear(self, append: cmd.AppendAudio) -> None:
        pcm = append.audio
        assert_canonical_input(append)
        listener = self._listener
        if not self._vad():
            if len(listener.buffer.audio) + len(pcm) > self._max_input_bytes:
                raise CommandError(
                    "input_backpressure", "too much uncommitted input", retryable=True
                )
            listener.append_unscored(pcm)
            return
        loop = asyncio.get_running_loop()
        probs = await loop.run_in_executor(self._hearing.executor, listener.scores, pcm)
        detector = listener.detector
        held = self._active is not None and self._holds_replies
        detector.min_speech_ms, detector.pause_ms = self._held_bars if held else self._turn_bars
        for event in listener.advance(pcm, probs):
            if isinstance(event, SpeechStart):
                await self._speech_started(event)
            elif isinstance(event, Pause):
                await self._speech_paused(event)
            else:
                await self._turn_over(event)
        await self._tick()
        self._heard_audio()

    async def _tick(self) -> None:
        """What the input clock moving on decides: speech going on, a verdict, a wait over."""
        clock, listener = self.input_clock_ms, self._listener
        if listener.speaking and not listener.detector.in_silence:
            if self._turn_end is not None:
                self._turn_end.spoke()
            if self._overlap is not None:
                await self._judged(self._overlap.judge.speaking(clock))
        elif self._overlap is not None:
            await self._judged(self._overlap.judge.tick(clock))
        turn_end = self._turn_end
        if turn_end is not None and turn_end.due(clock) and listener.speaking:
            await self._end_turn_now(turn_end)
        if self._idle.due(clock) and self._active is None and not listener.speaking:
            await self._prompt_idle()

    async def _speech_started(self, start: SpeechStart) -> None:
        self._speech_item = new_id("item")
        self._idle.stop()
        await self._events.put(
            pb.ConverseResponse(
                speech_started=pb.SpeechStarted(
                    audio_start_ms=start.start_ms, item_id=self._speech_item
                )
            )
        )
        self._on_speech_started(start)
        if self._active is not None:
            await self._overlap_started(self._active, start.start_ms)

    async def _speech_paused(self, pause: Pause) -> None:
        if self._overlap is not None:
            await self._overlap_paused(self._overlap, pause)
            return
        self._paused(pause)
        if self._turn_end is not None:
            self._turn_end.paused(pause.speech_end_ms)
            self._spawn(self._judge_pause(pause))

    async def _turn_over(self, turn: Turn) -> None:
        """VAD ended a turn (its silence lasted): answered, unless its verdict is pending."""
        if self._turn_end is not None:
            self._turn_end.spoke()
        if self._overlap is not None:
            self._overlap.turn = turn
            return
        await self._speech_stopped(turn)

    async def _end_turn_now(self, turn_end: TurnEndTimer) -> None:
        """The judged wait after a pause is over: the turn ends where its speech paused."""
        if self._overlap is not None or turn_end.pause_ms is None:
            return
        turn = self._listener.end_turn(turn_end.pause_ms)
        turn_end.spoke()
        await self._speech_stopped(turn)

    async def _speech_stopped(self, turn: Turn) -> None:
        item_id = self._speech_item or new_id("item")
        self._speech_item = ""
        await self._events.put(
            pb.ConverseResponse(
                speech_stopped=pb.SpeechStopped(audio_end_ms=turn.speech_end_ms, item_id=item_id)
            )
        )
        await self._answer_turn(item_id, turn, time.monotonic(), self._creates_response(), True)

    async def _commit(self, commit: cmd.CommitAudio) -> None:
        turn_started = time.monotonic()
        if not self._listener.buffer.audio:
            raise CommandError("input_audio_buffer_empty", "there is no input audio to commit")
        speaking = self._listener.speaking
        turn = self._listener.stop_now()
        item_id = self._speech_item or new_id("item")
        self._speech_item = ""
        self._abandon_overlap()  # the client took the turn: nothing is judged any more
        if speaking:
            await self._events.put(
                pb.ConverseResponse(
                    speech_stopped=pb.SpeechStopped(
                        audio_end_ms=turn.speech_end_ms, item_id=item_id
                    )
                )
            )
        create = self._creates_response(commit)
        await self._answer_turn(item_id, turn, turn_started, create, False)

    async def _answer_turn(
        self,
        item_id: str,
        turn: Turn,
        turn_started: float,
        create: bool,
        by_server_vad: bool,
        *,
        idle: bool = False,
    ) -> None:
        """Commits a turn (``idle``: the silence of an idle prompt), lets the engine hear it,
        and answers it if ``create``."""
        self._idle.stop()
        user, item = await self._commit_turn(turn.audio, item_id, text_final=False)
        user.idle = idle
        await self._heard_turn(user, item, turn, by_server_vad)
        if create:
            await self._take_turn(turn_started, by_server_vad=by_server_vad)

    # -- the end of a turn, judged ---------------------------------------------------------

    async def _judge_pause(self, pause: Pause) -> None:
        """Judges the turn up to ``pause`` (off the worker) and hands the result back: its
        sound at once, while its words are being written, then the words. Where the sound is
        judged before the words are, that is a first decision (the words still to be read)."""
        loop = asyncio.get_running_loop()
        hearing, pause_ms = self._hearing, pause.speech_end_ms
        reading = asyncio.ensure_future(self._read_pause(pause))
        sound = None
        if hearing.ear is not None:
            try:
                sound = await loop.run_in_executor(
                    hearing.executor, hearing.ear.probability, pause.audio
                )
            except Exception:
                logger.exception("session %s: hearing a pause failed", self.id, extra=self._log)
            if sound is not None and hearing.scorer is not None and not reading.done():
                first = Judgement(sound=sound, reading=True)
                await self._post(lambda: self._pause_judged(pause_ms, "", first))
        text, words = await reading
        judgement = Judgement(sound=sound, words=words)
        await self._post(lambda: self._pause_judged(pause_ms, text, judgement))

    async def _read_pause(self, pause: Pause) -> tuple[str, float | None]:
        """The words up to ``pause`` and the reader's judgement of them (None: not judged)."""
        reading, scorer = self._pause_words(pause), self._hearing.scorer
        text = ""
        try:
            text = await reading if reading is not None else ""
            if text.strip() and scorer is not None:
                loop = asyncio.get_running_loop()
                words = await loop.run_in_executor(self._hearing.executor, scorer.probability, text)
                return text, words
        except Exception:  # a failed judgement of the words leaves the sound's
            logger.exception("session %s: judging a pause failed", self.id, extra=self._log)
        return text, None

    async def _pause_judged(self, pause_ms: float, text: str, judgement: Judgement) -> None:
        turn_end = self._turn_end
        decision = turn_end.judged(pause_ms, judgement, self.input_clock_ms) if turn_end else None
        if turn_end is None or decision is None:
            return  # the user spoke on, or detection changed
        eagerness = self.config.turn_detection.eagerness
        await self._events.put(decision.event(self._speech_item, eagerness, text))
        if turn_end.due(self.input_clock_ms) and self._listener.speaking:
            await self._end_turn_now(turn_end)

    # -- idle prompts ----------------------------------------------------------------------

    def _finish(self, answer: Answer, outcome: Outcome) -> pb.ConverseResponse:
        event = super()._finish(answer, outcome)
        # The silence counts once the answer was heard (one out of band was the client's).
        if not answer.out_of_band and not self._listener.speaking:
            self._idle.arm(self.input_clock_ms + heard_by(answer.first_audio, answer.sent_ms))
        return event

    async def _prompt_idle(self) -> None:
        since_ms = self._idle.since_ms or 0.0
        self._idle.stop()
        turn = self._listener.stop_now()  # the silence it holds
        item_id = new_id("item")
        triggered = pb.IdleTimeoutTriggered(
            audio_start_ms=since_ms, audio_end_ms=self.input_clock_ms, item_id=item_id
        )
        await self._events.put(pb.ConverseResponse(idle_timeout_triggered=triggered))
        # Not detected speech: the response answers even a silence (the engine prompts).
        await self._answer_turn(item_id, turn, time.monotonic(), True, False, idle=True)

    # -- clearing --------------------------------------------------------------------------

    def _clear_input(self) -> None:
        self._listener.reset()
        self._speech_item = ""
        self._abandon_overlap()
        self._forget_speech()

    async def _on_barge_in(self, barge_in: cmd.BargeIn) -> None:
        answer = self._require_active("")
        self._listener.reset()  # what the user said over the assistant is dropped too
        self._speech_item = ""
        self._abandon_overlap()
        self._forget_speech()
        await self._cancel(answer, "barge_in")
