"""One vllm conversation: a worker that applies commands in order, and a response player.

The worker owns the session's state and is its only writer, except for the player's progress
counters of the reply it plays. A committed turn (or ``create_response``) starts a reply: the
conversation becomes a chat prompt with the user's audio in it (:mod:`.prompt`), one vLLM
request with its own id (``<session>-<response>``) streams the answer, and the speaker
(:mod:`.speaking`) turns it into events. A cancel, a barge-in or a new turn cancels the
player, whose exit aborts the vLLM request (freeing its KV cache), takes back the output the
reader has not taken, and only then emits ``response_done``: nothing of a response follows
its end. The command refusals and event shapes are the loopback engine's, so every engine
passes the same conformance suite.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncIterator, Callable

from omni_grpc.core.errors import CommandError
from omni_grpc.engine.base import EngineError, EngineSession
from omni_grpc.engine.embedded.tts import Espeak
from omni_grpc.engine.loopback.history import History
from omni_grpc.engine.loopback.outbox import Outbox
from omni_grpc.engine.loopback.turns import done_event, output_item
from omni_grpc.engine.vllm.conversation import Conversation, new_id
from omni_grpc.engine.vllm.options import VllmOptions
from omni_grpc.engine.vllm.prompt import Prompt, build_prompt
from omni_grpc.engine.vllm.runtime import Generation, Sampling, VllmRuntime
from omni_grpc.engine.vllm.speaking import FINISHES, Reply, Speaker
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

IN_RATE_HZ = 16000
_ITEMS_KEPT = 64  # conversation items that retrieve, delete, truncate and the prompt can reach
_ANSWERS_KEPT = 16  # responses that ack_playback and clear_output_audio can name


class VllmSession(Conversation, EngineSession):
    """One conversation with the vllm engine; see the module docstring."""

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        options: VllmOptions,
        runtime: VllmRuntime,
        tts: Espeak,
        on_close: Callable[[VllmSession], None],
    ) -> None:
        self.id = session_id
        self.config = config
        self._options = options
        self._runtime = runtime
        self._on_close = on_close
        self._mailbox: asyncio.Queue[pb.ConverseRequest] = asyncio.Queue(self._options.queue_size)
        self._outbox = Outbox(self._options.queue_size)
        self._speaker = Speaker(self._options, tts, self._outbox)
        self._buffer = bytearray()  # uncommitted canonical input
        self._pending: list[str] = []  # committed user items no response has answered
        self._pending_audio_ms = 0.0
        # The audio of the latest user items, for the prompt; the oldest go first.
        self._heard: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._history = History(_ITEMS_KEPT)
        self._answers: dict[str, Reply] = {}  # insertion-ordered, newest last
        self._active: Reply | None = None
        self._player: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._worker = asyncio.create_task(self._run(), name=f"vllm-{session_id}")

    def __repr__(self) -> str:
        return f"VllmSession({self.id})"

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
            raise EngineError(f"vllm session {self.id} failed") from self._failure

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = [task for task in (self._worker, self._player) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)  # the player's exit aborts its vLLM request
        self._outbox.end(drop=True)
        while not self._mailbox.empty():  # frees a submit that still waits for room
            self._mailbox.get_nowait()
        self._on_close(self)

    # -- the worker ----------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                await self._apply(await self._mailbox.get())
        except Exception as error:  # a bug must end the session, not leave it hanging
            logger.exception("session %s: vllm worker failed", self.id)
            self._failure = error
            if self._player is not None:
                self._player.cancel()
            self._outbox.end(drop=False)

    async def _apply(self, request: pb.ConverseRequest) -> None:
        kind = request.WhichOneof("command")
        handler = getattr(self, f"_on_{kind}", None) if kind else None
        try:
            if handler is None:
                raise CommandError("bad_event", f"the vllm engine does not take {kind}")
            await handler(request)
        except CommandError as error:
            body = error.to_error(client_seq=request.client_seq, event_id=request.event_id)
            await self._outbox.put(pb.ConverseResponse(error=body))

    # -- input ---------------------------------------------------------------------------

    async def _on_update_session(self, request: pb.ConverseRequest) -> None:
        self.config = request.update_session.config

    async def _on_append_input_audio(self, request: pb.ConverseRequest) -> None:
        append = request.append_input_audio
        if (append.encoding or pb.AUDIO_ENCODING_PCM16) != pb.AUDIO_ENCODING_PCM16 or (
            append.sample_rate_hz or IN_RATE_HZ
        ) != IN_RATE_HZ:
            raise CommandError(
                "unsupported_audio_format",
                "engines take canonical input: pcm16 at 16 kHz",
                param="encoding",
            )
        if len(append.audio) % 2:
            raise CommandError("bad_audio", "pcm16 needs an even number of bytes", param="audio")
        if len(self._buffer) + len(append.audio) > self._options.max_input_s * IN_RATE_HZ * 2:
            raise CommandError("input_backpressure", "too much uncommitted input", retryable=True)
        self._buffer += append.audio

    async def _on_commit_input_audio(self, request: pb.ConverseRequest) -> None:
        turn_started = time.monotonic()
        if not self._buffer:
            raise CommandError("input_audio_buffer_empty", "there is no input audio to commit")
        duration_ms = len(self._buffer) / 2 * 1000 / IN_RATE_HZ
        part = pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_AUDIO, audio_duration_ms=duration_ms)
        item = self._user_item(part)
        previous = self._history.add(item)
        self._keep_audio(item.id, bytes(self._buffer))
        self._add_pending(item.id, duration_ms)
        self._buffer.clear()
        await self._outbox.put(
            pb.ConverseResponse(
                input_committed=pb.InputCommitted(
                    item_id=item.id, previous_item_id=previous, audio_duration_ms=duration_ms
                )
            )
        )
        await self._announce(item, previous)
        commit = request.commit_input_audio
        if commit.create_response if commit.HasField("create_response") else True:
            if self._active is not None:  # the user took the turn: the old answer gives way
                await self._cancel(self._active, "turn_detected")
            await self._start(self._modalities(), turn_started, None)

    async def _on_clear_input_audio(self, request: pb.ConverseRequest) -> None:
        self._buffer.clear()
        await self._outbox.put(pb.ConverseResponse(input_cleared=pb.InputCleared()))

    async def _on_cancel_input(self, request: pb.ConverseRequest) -> None:
        self._buffer.clear()
        if self._active is not None:
            await self._cancel(self._active, "barge_in")
        await self._outbox.put(pb.ConverseResponse(input_cleared=pb.InputCleared()))

    async def _on_append_input_text(self, request: pb.ConverseRequest) -> None:
        text = request.append_input_text.text
        item = self._user_item(pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text=text))
        previous = self._history.add(item)
        self._add_pending(item.id, 0.0)
        await self._announce(item, previous)

    # -- responses -----------------------------------------------------------------------

    async def _on_create_response(self, request: pb.ConverseRequest) -> None:
        if self._active is not None:
            raise CommandError(
                "response_already_active", f"response {self._active.id} is still running"
            )
        if not self._pending:
            raise CommandError(
                "response_create_without_input", "nothing was committed since the last response"
            )
        create = request.create_response
        modalities = tuple(create.output_modalities) or self._modalities()
        instructions = create.instructions if create.HasField("instructions") else None
        await self._start(modalities, time.monotonic(), instructions)

    async def _on_cancel_response(self, request: pb.ConverseRequest) -> None:
        reply = self._require_active(request.cancel_response.response_id)
        await self._cancel(reply, "client_cancelled")

    async def _on_barge_in(self, request: pb.ConverseRequest) -> None:
        await self._cancel(self._require_active(""), "barge_in")

    async def _on_clear_output_audio(self, request: pb.ConverseRequest) -> None:
        named = request.clear_output_audio.response_id
        finished = self._answers.get(named)
        cleared = pb.ConverseResponse(output_audio_cleared=pb.OutputAudioCleared(response_id=named))
        if finished is not None and finished.done:  # nothing runs here; the client's copy stops
            await self._outbox.put(cleared)
            return
        reply = self._require_active(named)
        cleared.output_audio_cleared.response_id = reply.id
        await self._cancel(reply, "output_audio_cleared", first=cleared)

    def _require_active(self, response_id: str) -> Reply:
        if self._active is None:
            raise CommandError("response_not_active", "no response is running")
        if response_id and response_id != self._active.id:
            raise CommandError(
                "response_not_active", f"response {response_id} is not running", param="response_id"
            )
        return self._active

    async def _start(
        self,
        modalities: tuple[pb.Modality.ValueType, ...],
        turn_started: float,
        instructions: str | None,
    ) -> None:
        if self._player is not None:  # the last reply may still be queueing its done event
            await asyncio.wait([self._player])
        response_id = new_id("resp")
        reply = Reply(
            id=response_id,
            item_id=new_id("item"),
            turn_started=turn_started,
            modalities=modalities,
            input_audio_ms=self._pending_audio_ms,
            input_tokens=0,
            output=b"",
            transcript="",
            request_id=f"{self.id}-{response_id}",
            instructions=(
                instructions
                if instructions is not None
                else self.config.instructions or self._options.instructions
            ),
            voice=self.config.voice or self._options.voice,
        )
        self._pending, self._pending_audio_ms = [], 0.0
        self._active = reply
        self._answers[reply.id] = reply
        while len(self._answers) > _ANSWERS_KEPT:
            del self._answers[next(iter(self._answers))]
        created = pb.Response(
            id=reply.id, status=pb.RESPONSE_STATUS_IN_PROGRESS, output_modalities=modalities
        )
        await self._outbox.put(
            pb.ConverseResponse(
                response_created=pb.ResponseCreated(response=created, item_id=reply.item_id)
            )
        )
        prompt, sampling = self._request(reply)
        self._player = asyncio.create_task(
            self._play(reply, prompt, sampling), name=reply.request_id
        )

    def _request(self, reply: Reply) -> tuple[Prompt, Sampling]:
        """What the vLLM request of ``reply`` asks: the conversation as it is now."""
        prompt = build_prompt(
            reply.instructions,
            self._entries(),
            placeholder=self._runtime.audio_placeholder,
            audio_turns=self._options.audio_turns,
            max_audio_s=self._options.max_audio_s,
        )
        config = self.config
        max_tokens = (
            config.max_output_tokens
            if config.HasField("max_output_tokens")
            else self._options.max_tokens
        )
        sampling = Sampling(
            max_tokens=max(1, max_tokens),
            min_tokens=self._options.min_tokens,
            temperature=(
                config.temperature if config.HasField("temperature") else self._options.temperature
            ),
            logit_bias=self._options.logit_bias,
        )
        return prompt, sampling

    async def _play(self, reply: Reply, prompt: Prompt, sampling: Sampling) -> None:
        generation: Generation | None = None
        failure = ""
        try:
            text = self._runtime.render(prompt.messages)
            generation = self._runtime.generate(reply.request_id, text, prompt.audio, sampling)
            await self._speaker.run(reply, generation)
        except EngineError as error:
            failure = str(error)
        except Exception as error:  # the chat template refused the conversation, a TTS fault
            logger.exception("session %s: response %s failed", self.id, reply.id)
            failure = f"{type(error).__name__}: {error}"
        finally:
            # Cancelled or failed, the request must not go on generating into nothing.
            if generation is not None:
                await generation.abort()
        if failure:
            logger.warning("session %s: %s", self.id, failure)
            error_body = CommandError("engine_error", failure[:500]).to_error()
            await self._outbox.put(pb.ConverseResponse(error=error_body))
            await self._outbox.put(self._finish(reply, pb.RESPONSE_STATUS_FAILED, "engine_error"))
            return
        status, reason = FINISHES.get(reply.finish, (pb.RESPONSE_STATUS_FAILED, reply.finish))
        await self._outbox.put(self._finish(reply, status, reason))

    async def _cancel(
        self, reply: Reply, reason: str, first: pb.ConverseResponse | None = None
    ) -> None:
        if self._player is not None and not self._player.done():
            self._player.cancel()
            await asyncio.wait([self._player])
        # Output the reader has not taken never reaches the client: take it back and count it
        # as unsent (it is the newest output, so its text is the end of sent_text).
        unsent_chars = 0
        for event in self._outbox.take_back(reply.id):
            kind = event.WhichOneof("event")
            if kind == "output_audio_delta":
                reply.sent_ms = min(reply.sent_ms, event.output_audio_delta.start_ms)
            elif kind in ("output_audio_transcript_delta", "output_text_delta"):
                unsent_chars += len(getattr(event, kind).delta)
        reply.sent_text = reply.sent_text[: len(reply.sent_text) - unsent_chars]
        if first is not None:
            await self._outbox.put(first)
        await self._outbox.put(self._finish(reply, pb.RESPONSE_STATUS_CANCELLED, reason))

    def _finish(
        self, reply: Reply, status: pb.ResponseStatus.ValueType, reason: str
    ) -> pb.ConverseResponse:
        if self._active is reply:
            self._active = None
        reply.done = True
        item = output_item(reply, status)
        self._history.add(item)
        event = done_event(reply, item, status, reason, time.monotonic())
        event.response_done.response.usage.output_tokens = reply.output_tokens
        return event
