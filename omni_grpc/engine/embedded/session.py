"""One embedded conversation: a worker that applies commands in order, and a response player.

The worker owns the session's state. It hears input (server VAD scores each 32 ms window on
the VAD thread), commits turns, starts their transcription on the model threads, and starts
responses, each played by its own task (:mod:`.speaking`). The command refusals, the event
shapes and the cancel rules are the loopback engine's, so both pass the same conformance
suite: a cancel stops the player, takes back its output the reader has not taken, and only
then queues ``response_done``, so nothing of a response follows its end.

Speech that starts while a response plays is an overlap. Under ``barge_in_on_speech`` (with
``interrupt_response``) the response is cancelled with reason ``turn_detected`` in the same
window that confirmed the speech; under ``listen_only`` it plays on, and the new turn's
response waits for it to finish.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

from omni_grpc.core.errors import CommandError
from omni_grpc.engine.base import EngineError, EngineSession
from omni_grpc.engine.embedded.conversation import Conversation, new_id
from omni_grpc.engine.embedded.listening import Listener, Pause, SpeechStart, Turn, duration_ms
from omni_grpc.engine.embedded.models import Runtime
from omni_grpc.engine.embedded.speaking import Speech, UserTurn
from omni_grpc.engine.loopback.history import History
from omni_grpc.engine.loopback.outbox import Outbox
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

_ITEMS_KEPT = 64  # conversation items that retrieve, delete, truncate and the LM can reach
_SESSION_OPTIONS = ("responder", "pace")


class EmbeddedSession(Conversation, EngineSession):
    """One conversation with the embedded engine."""

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        runtime: Runtime,
        on_close: Callable[[EmbeddedSession], None],
    ) -> None:
        self.id = session_id
        self.config = config
        self._runtime = runtime
        self._on_close = on_close
        options = runtime.options
        self._mailbox: asyncio.Queue[pb.ConverseRequest] = asyncio.Queue(options.queue_size)
        self._outbox = Outbox(options.queue_size)
        self._listener = Listener(
            runtime.vad, config.turn_detection, options.min_speech_ms, options.max_input_s * 1000
        )
        self._speech_item = ""  # the user item that detected speech will become
        self._pending: list[UserTurn] = []  # committed, not answered yet
        self._last_turn: UserTurn | None = None
        # A transcription started at a pause: (where the speech paused, the job).
        self._guess: tuple[float, asyncio.Future[str]] | None = None
        self._history = History(_ITEMS_KEPT)
        self._answers: dict[str, Speech] = {}  # insertion-ordered, newest last
        self._active: Speech | None = None
        self._player: asyncio.Task[None] | None = None
        self._deferred = False  # a turn's response waits for the active one (listen_only)
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None
        self._closed = False
        self._busy = False
        self._responder, self._realtime, problem = self._session_options(config)
        self._worker = asyncio.create_task(self._run(problem), name=f"embedded-{session_id}")

    def __repr__(self) -> str:
        return f"EmbeddedSession({self.id})"

    @property
    def input_clock_ms(self) -> float:
        """Input audio heard so far, in milliseconds (the clock VAD times are on)."""
        return self._listener.buffer.clock_ms

    # -- the seam ------------------------------------------------------------------------

    async def submit(self, request: pb.ConverseRequest) -> None:
        if self._closed or self._failure is not None:
            logger.debug("session %s: command after the end ignored", self.id)
            return
        await self._mailbox.put(request)

    async def events(self) -> AsyncIterator[pb.ConverseResponse]:
        while (event := await self._outbox.get()) is not None:
            yield event
        if self._failure is not None:
            raise EngineError(f"embedded session {self.id} failed") from self._failure

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = [self._worker, *self._tasks, *([self._player] if self._player else [])]
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        if self._active is not None:
            self._active.done = True
        self._outbox.end(drop=True)
        while not self._mailbox.empty():  # frees a submit that still waits for room
            self._mailbox.get_nowait()
        self._on_close(self)

    async def idle(self) -> None:
        """Waits until every command submitted so far has been applied and the reader has
        taken the events that caused (tests and benchmarks step the input clock with it)."""
        # Polled: the three conditions belong to three objects, and this is not a hot path.
        while not self._mailbox.empty() or self._busy or len(self._outbox):  # noqa: ASYNC110
            await asyncio.sleep(0.001)

    # -- the worker ----------------------------------------------------------------------

    async def _run(self, problem: CommandError | None) -> None:
        if problem is not None:
            await self._outbox.put(pb.ConverseResponse(error=problem.to_error()))
        try:
            while True:
                request = await self._mailbox.get()
                self._busy = True
                await self._apply(request)
                self._busy = self._mailbox.qsize() > 0
        except Exception as error:  # a bug must end the session, not leave it hanging
            logger.exception("session %s: embedded worker failed", self.id)
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        self._failure = error
        for task in (self._player, *self._tasks):
            if task is not None:
                task.cancel()
        self._outbox.end(drop=False)

    async def _apply(self, request: pb.ConverseRequest) -> None:
        kind = request.WhichOneof("command")
        handler = getattr(self, f"_on_{kind}", None) if kind else None
        try:
            if handler is None:
                raise CommandError("bad_event", f"the embedded engine does not take {kind}")
            await handler(request)
        except CommandError as error:
            body = error.to_error(client_seq=request.client_seq, event_id=request.event_id)
            await self._outbox.put(pb.ConverseResponse(error=body))

    def _session_options(self, config: pb.SessionConfig) -> tuple[str, bool, CommandError | None]:
        options = {key: str(value) for key, value in config.engine_options.items()}
        responder = options.get("responder", self._runtime.options.responder)
        pace = options.get("pace", self._runtime.options.pace)
        problem = None
        unknown = sorted(set(options) - set(_SESSION_OPTIONS))
        if (
            unknown
            or responder not in ("auto", "echo", "smollm2")
            or pace not in ("realtime", "fast")
        ):
            problem = CommandError(
                "invalid_session_config",
                "engine_options takes responder (auto, echo, "
                "smollm2) and pace (realtime, fast); the engine's defaults apply",
                param="engine_options",
            )
            responder, pace = self._runtime.options.responder, self._runtime.options.pace
        if responder == "smollm2" and self._runtime.smol is None:
            problem = CommandError(
                "invalid_session_config",
                "SmolLM2 is not installed on this server; answering with echo",
                param="engine_options",
            )
        return responder, pace == "realtime", problem

    # -- input ---------------------------------------------------------------------------

    def _vad(self) -> bool:
        return self.config.turn_detection.type == pb.TURN_DETECTION_TYPE_SERVER_VAD

    async def _on_update_session(self, request: pb.ConverseRequest) -> None:
        was_vad = self._vad()
        self.config = request.update_session.config
        self._listener.configure(self.config.turn_detection)
        if was_vad and not self._vad() and self._listener.speaking:
            self._listener.detector.reset()  # the client commits from now on
            self._listener.speech_start_ms = None
        self._responder, self._realtime, problem = self._session_options(self.config)
        if problem is not None:
            raise problem

    async def _on_append_input_audio(self, request: pb.ConverseRequest) -> None:
        append = request.append_input_audio
        if (append.encoding or pb.AUDIO_ENCODING_PCM16) != pb.AUDIO_ENCODING_PCM16 or (
            append.sample_rate_hz or 16000
        ) != 16000:
            raise CommandError(
                "unsupported_audio_format",
                "engines take canonical input: pcm16 at 16 kHz",
                param="encoding",
            )
        if len(append.audio) % 2:
            raise CommandError("bad_audio", "pcm16 needs an even number of bytes", param="audio")
        pcm = append.audio
        if not self._vad():
            held = len(self._listener.buffer.audio) + len(pcm)
            if held > self._runtime.options.max_input_s * 32000:
                raise CommandError(
                    "input_backpressure", "too much uncommitted input", retryable=True
                )
            self._listener.append_unscored(pcm)
            return
        loop = asyncio.get_running_loop()
        probs = await loop.run_in_executor(self._runtime.vad_executor, self._listener.scores, pcm)
        for event in self._listener.advance(pcm, probs):
            if isinstance(event, SpeechStart):
                await self._speech_started(event)
            elif isinstance(event, Pause):
                self._speculate(event)
            else:
                await self._speech_stopped(event)

    def _speculate(self, pause: Pause) -> None:
        """Starts transcribing at a pause, so a turn that ends there has its words sooner.

        One guess at a time: if speech goes on and pauses again while the last guess still
        runs, the new pause waits for the real end of the turn instead.
        """
        if self._guess is not None and not self._guess[1].done():
            return
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(
            self._runtime.executor, self._runtime.asr.transcribe, pause.audio
        )
        job.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._guess = (pause.speech_end_ms, job)

    async def _speech_started(self, start: SpeechStart) -> None:
        self._speech_item = new_id("item")
        await self._outbox.put(
            pb.ConverseResponse(
                speech_started=pb.SpeechStarted(
                    audio_start_ms=start.start_ms, item_id=self._speech_item
                )
            )
        )
        if self._active is None:
            return
        policy = self.config.overlap_policy
        if (
            policy == pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH
            and self.config.turn_detection.interrupt_response
        ):
            await self._outbox.put(
                pb.ConverseResponse(
                    overlap_decision=pb.OverlapDecision(
                        policy=policy,
                        action=pb.OVERLAP_ACTION_BARGE_IN,
                        reason="barge_in_on_speech",
                    )
                )
            )
            await self._cancel(self._active, "turn_detected")
        else:
            await self._outbox.put(
                pb.ConverseResponse(
                    overlap_decision=pb.OverlapDecision(
                        policy=policy, action=pb.OVERLAP_ACTION_LISTEN, reason="listen_only"
                    )
                )
            )

    async def _speech_stopped(self, turn: Turn) -> None:
        item_id = self._speech_item or new_id("item")
        self._speech_item = ""
        await self._outbox.put(
            pb.ConverseResponse(
                speech_stopped=pb.SpeechStopped(audio_end_ms=turn.speech_end_ms, item_id=item_id)
            )
        )
        guess, self._guess = self._guess, None
        job = guess[1] if guess is not None and guess[0] == turn.speech_end_ms else None
        create = self.config.turn_detection.create_response
        await self._commit(item_id, turn.audio, create=create, auto=True, job=job)

    async def _on_commit_input_audio(self, request: pb.ConverseRequest) -> None:
        turn_started = time.monotonic()
        if not self._listener.buffer.audio:
            raise CommandError("input_audio_buffer_empty", "there is no input audio to commit")
        speaking = self._listener.speaking
        turn = self._listener.stop_now()
        item_id = self._speech_item or new_id("item")
        self._speech_item = ""
        if speaking:
            await self._outbox.put(
                pb.ConverseResponse(
                    speech_stopped=pb.SpeechStopped(
                        audio_end_ms=turn.speech_end_ms, item_id=item_id
                    )
                )
            )
        commit = request.commit_input_audio
        create = (
            commit.create_response
            if commit.HasField("create_response")
            else self.config.turn_detection.create_response
        )
        await self._commit(
            item_id, turn.audio, create=create, auto=False, turn_started=turn_started
        )

    async def _commit(
        self,
        item_id: str,
        pcm: bytes,
        *,
        create: bool,
        auto: bool,
        turn_started: float | None = None,
        job: asyncio.Future[str] | None = None,
    ) -> None:
        turn_started = turn_started or time.monotonic()
        length_ms = duration_ms(pcm)
        part = pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_AUDIO, audio_duration_ms=length_ms)
        item = self._user_item(part, item_id)
        previous = self._history.add(item)
        turn = UserTurn(item_id, previous, audio=pcm)
        self._add_pending(turn)
        await self._outbox.put(
            pb.ConverseResponse(
                input_committed=pb.InputCommitted(
                    item_id=item_id, previous_item_id=previous, audio_duration_ms=length_ms
                )
            )
        )
        await self._outbox.put(
            pb.ConverseResponse(item_added=pb.ItemAdded(item=item, previous_item_id=previous))
        )
        self._spawn(self._transcribe(turn, self._last_turn, job))
        self._last_turn = turn
        if create:
            await self._respond(auto=auto, turn_started=turn_started)

    async def _transcribe(
        self, turn: UserTurn, before: UserTurn | None, job: asyncio.Future[str] | None
    ) -> None:
        """Writes down a turn (or takes the transcript started at its pause)."""
        loop = asyncio.get_running_loop()
        try:
            text = await (
                job
                or loop.run_in_executor(
                    self._runtime.executor, self._runtime.asr.transcribe, turn.audio
                )
            )
        except Exception:
            logger.exception("session %s: transcription failed", self.id)
            text = ""
        if before is not None:  # transcripts come out in the order the turns were committed
            await before.transcribed.wait()
        turn.text = text
        if turn.item_id in self._history:
            item = self._history.get(turn.item_id)
            item.content[0].transcript = text
            await self._outbox.put(
                pb.ConverseResponse(
                    input_transcription=pb.InputTranscription(
                        item_id=turn.item_id, content_index=0, transcript=text
                    )
                )
            )
            await self._outbox.put(
                pb.ConverseResponse(
                    item_done=pb.ItemDone(item=item, previous_item_id=turn.previous_item_id)
                )
            )
        turn.transcribed.set()

    async def _on_clear_input_audio(self, request: pb.ConverseRequest) -> None:
        self._listener.reset()
        self._speech_item, self._guess = "", None
        await self._outbox.put(pb.ConverseResponse(input_cleared=pb.InputCleared()))

    async def _on_cancel_input(self, request: pb.ConverseRequest) -> None:
        self._listener.reset()
        self._speech_item, self._guess = "", None
        if self._active is not None:
            await self._cancel(self._active, "barge_in")
        await self._outbox.put(pb.ConverseResponse(input_cleared=pb.InputCleared()))

    async def _on_append_input_text(self, request: pb.ConverseRequest) -> None:
        text = request.append_input_text.text
        item = self._user_item(pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text=text))
        previous = self._history.add(item)
        turn = UserTurn(item.id, previous, text=text)
        turn.transcribed.set()
        self._add_pending(turn)
        await self._announce(item, previous)
