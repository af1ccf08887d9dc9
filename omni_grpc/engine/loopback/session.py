"""One loopback conversation: a worker that applies commands in order, and a response player.

The worker owns all state and is the only writer of it, except for the player's progress
counters of the answer it plays. A cancel cancels the player and waits for it to stop, takes
back its output that the reader has not taken, and only then emits ``response_done``: nothing
of a response can follow its end. The answer is marked finished, synchronously, right before
its done event is queued, so a cancel that comes later finds nothing to cancel instead of
ending a response twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable

from omni_grpc import audio
from omni_grpc.core.errors import CommandError
from omni_grpc.engine.base import EngineError, EngineSession
from omni_grpc.engine.loopback.history import History
from omni_grpc.engine.loopback.options import LoopbackOptions
from omni_grpc.engine.loopback.outbox import Outbox
from omni_grpc.engine.loopback.turns import (
    IN_RATE_HZ,
    OUT_RATE_HZ,
    Answer,
    Modalities,
    PendingInput,
    acknowledge,
    answer_for,
    done_event,
    find_answer,
    output_item,
    split_words,
)
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

_ITEMS_KEPT = 64  # conversation items that retrieve, delete and truncate can reach
_ANSWERS_KEPT = 16  # responses that ack_playback and clear_output_audio can name


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


class LoopbackSession(EngineSession):
    """One loopback conversation; see the package docstring for what it answers."""

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        options: LoopbackOptions,
        on_close: Callable[[LoopbackSession], None],
    ) -> None:
        self.id = session_id
        self.config = config
        self._options = options
        self._on_close = on_close
        self._mailbox: asyncio.Queue[pb.ConverseRequest] = asyncio.Queue(options.queue_size)
        self._outbox = Outbox(options.queue_size)
        self._buffer = bytearray()  # uncommitted canonical input
        self._pending: list[PendingInput] = []  # committed, not answered yet
        self._history = History(_ITEMS_KEPT)
        self._answers: dict[str, Answer] = {}  # insertion-ordered, newest last
        self._active: Answer | None = None
        self._player: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._mirror: tuple[str, audio.StreamResampler] | None = None  # mode=mirror only
        self._mirror_ms = 0.0
        self._worker = asyncio.create_task(self._run(), name=f"loopback-{session_id}")

    def __repr__(self) -> str:
        return f"LoopbackSession({self.id})"

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
            raise EngineError(f"loopback session {self.id} failed") from self._failure

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = [task for task in (self._worker, self._player) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
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
            logger.exception("session %s: loopback worker failed", self.id)
            self._failure = error
            if self._player is not None:
                self._player.cancel()
            self._outbox.end(drop=False)

    async def _apply(self, request: pb.ConverseRequest) -> None:
        kind = request.WhichOneof("command")
        handler = getattr(self, f"_on_{kind}", None) if kind else None
        try:
            if handler is None:
                raise CommandError("bad_event", f"the loopback engine does not take {kind}")
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
        if len(self._buffer) + len(append.audio) > self._max_input_bytes():
            raise CommandError("input_backpressure", "too much uncommitted input", retryable=True)
        if self._options.mode == "mirror":
            await self._reflect(append.audio)
            return
        self._buffer += append.audio

    async def _reflect(self, pcm16_16k: bytes) -> None:
        """Mirror mode: the appended audio comes straight back as one output chunk."""
        if self._mirror is None:
            response_id = _new_id("resp")
            # One resampler for the whole stream keeps chunk seams clean.
            self._mirror = response_id, audio.StreamResampler(IN_RATE_HZ, OUT_RATE_HZ)
            await self._outbox.put(
                pb.ConverseResponse(
                    response_created=pb.ResponseCreated(
                        response=pb.Response(id=response_id, status=pb.RESPONSE_STATUS_IN_PROGRESS)
                    )
                )
            )
        response_id, resampler = self._mirror
        samples = resampler.process(audio.decode(pcm16_16k, pb.AUDIO_ENCODING_PCM16, IN_RATE_HZ))
        out = audio.encode(samples, pb.AUDIO_ENCODING_PCM16, OUT_RATE_HZ)
        duration_ms = len(out) / 2 * 1000 / OUT_RATE_HZ
        await self._outbox.put(
            pb.ConverseResponse(
                output_audio_delta=pb.OutputAudioDelta(
                    audio=out,
                    response_id=response_id,
                    encoding=pb.AUDIO_ENCODING_PCM16,
                    sample_rate_hz=OUT_RATE_HZ,
                    start_ms=self._mirror_ms,
                    duration_ms=duration_ms,
                )
            )
        )
        self._mirror_ms += duration_ms

    async def _on_commit_input_audio(self, request: pb.ConverseRequest) -> None:
        turn_started = time.monotonic()
        if not self._buffer:
            raise CommandError("input_audio_buffer_empty", "there is no input audio to commit")
        duration_ms = len(self._buffer) / 2 * 1000 / IN_RATE_HZ
        part = pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_AUDIO, audio_duration_ms=duration_ms)
        item = self._user_item(part)
        previous = self._history.add(item)
        self._add_pending(PendingInput(item.id, audio=bytes(self._buffer)))
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
            await self._start(self._modalities(), turn_started)

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
        self._add_pending(PendingInput(item.id, text=text))
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
        modalities = tuple(request.create_response.output_modalities) or self._modalities()
        await self._start(modalities, time.monotonic())

    async def _on_cancel_response(self, request: pb.ConverseRequest) -> None:
        answer = self._require_active(request.cancel_response.response_id)
        await self._cancel(answer, "client_cancelled")

    async def _on_barge_in(self, request: pb.ConverseRequest) -> None:
        await self._cancel(self._require_active(""), "barge_in")

    async def _on_clear_output_audio(self, request: pb.ConverseRequest) -> None:
        named = request.clear_output_audio.response_id
        finished = self._answers.get(named)
        cleared = pb.ConverseResponse(output_audio_cleared=pb.OutputAudioCleared(response_id=named))
        if finished is not None and finished.done:  # nothing runs here; the client's copy stops
            await self._outbox.put(cleared)
            return
        answer = self._require_active(named)
        cleared.output_audio_cleared.response_id = answer.id
        await self._cancel(answer, "output_audio_cleared", first=cleared)

    def _require_active(self, response_id: str) -> Answer:
        if self._active is None:
            raise CommandError("response_not_active", "no response is running")
        if response_id and response_id != self._active.id:
            raise CommandError(
                "response_not_active", f"response {response_id} is not running", param="response_id"
            )
        return self._active

    async def _start(self, modalities: Modalities, turn_started: float) -> None:
        if self._player is not None:  # the last answer may still be queueing its done event
            await asyncio.wait([self._player])
        inputs, self._pending = self._pending, []
        answer = answer_for(
            inputs,
            response_id=_new_id("resp"),
            item_id=_new_id("item"),
            modalities=modalities,
            turn_started=turn_started,
        )
        self._active = answer
        self._answers[answer.id] = answer
        while len(self._answers) > _ANSWERS_KEPT:
            del self._answers[next(iter(self._answers))]
        created = pb.Response(
            id=answer.id, status=pb.RESPONSE_STATUS_IN_PROGRESS, output_modalities=modalities
        )
        await self._outbox.put(
            pb.ConverseResponse(
                response_created=pb.ResponseCreated(response=created, item_id=answer.item_id)
            )
        )
        self._player = asyncio.create_task(self._play(answer), name=f"loopback-{answer.id}")

    async def _play(self, answer: Answer) -> None:
        chunk_bytes = self._options.chunk_ms * OUT_RATE_HZ // 1000 * 2
        chunks = audio.chunk_pcm16(answer.output, chunk_bytes)
        start_ms = 0.0
        for chunk, piece in zip(chunks, split_words(answer.transcript, len(chunks)), strict=True):
            end_ms = start_ms + len(chunk) / 2 * 1000 / OUT_RATE_HZ
            await self._pace(answer, end_ms)
            ids = {"response_id": answer.id, "item_id": answer.item_id}
            if answer.speaks:
                await self._outbox.put(
                    pb.ConverseResponse(
                        output_audio_delta=pb.OutputAudioDelta(
                            audio=chunk,
                            encoding=pb.AUDIO_ENCODING_PCM16,
                            sample_rate_hz=OUT_RATE_HZ,
                            start_ms=start_ms,
                            duration_ms=end_ms - start_ms,
                            **ids,
                        )
                    )
                )
                answer.first_audio = answer.first_audio or time.monotonic()
                answer.sent_ms = end_ms
                await self._outbox.put(
                    pb.ConverseResponse(
                        output_audio_transcript_delta=pb.OutputAudioTranscriptDelta(
                            delta=piece, **ids
                        )
                    )
                )
            else:
                await self._outbox.put(
                    pb.ConverseResponse(output_text_delta=pb.OutputTextDelta(delta=piece, **ids))
                )
            # No await since the put: the counters always match what was queued.
            answer.first_text = answer.first_text or time.monotonic()
            answer.sent_text += piece
            answer.marks.append((end_ms, len(answer.sent_text)))
            start_ms = end_ms
        await self._outbox.put(self._finish(answer, pb.RESPONSE_STATUS_COMPLETED, "stop"))

    async def _pace(self, answer: Answer, end_ms: float) -> None:
        if self._options.pace == "fast":
            await asyncio.sleep(0)  # still let commands (a cancel) in between chunks
            return
        # A chunk is due when its audio would be finished in real time; a late reader gets the
        # backlog at once instead of drifting further behind.
        due = answer.started + end_ms / 1000 / self._options.speed
        await asyncio.sleep(max(0.0, due - time.monotonic()))

    async def _cancel(
        self, answer: Answer, reason: str, first: pb.ConverseResponse | None = None
    ) -> None:
        if self._player is not None and not self._player.done():
            self._player.cancel()
            await asyncio.wait([self._player])
        # Output the reader has not taken never reaches the client: take it back and count it
        # as unsent (it is the newest output, so its text is the end of sent_text).
        unsent_chars = 0
        for event in self._outbox.take_back(answer.id):
            kind = event.WhichOneof("event")
            if kind == "output_audio_delta":
                answer.sent_ms = min(answer.sent_ms, event.output_audio_delta.start_ms)
            elif kind in ("output_audio_transcript_delta", "output_text_delta"):
                unsent_chars += len(getattr(event, kind).delta)
        answer.sent_text = answer.sent_text[: len(answer.sent_text) - unsent_chars]
        if first is not None:
            await self._outbox.put(first)
        await self._outbox.put(self._finish(answer, pb.RESPONSE_STATUS_CANCELLED, reason))

    def _finish(
        self, answer: Answer, status: pb.ResponseStatus.ValueType, reason: str
    ) -> pb.ConverseResponse:
        if self._active is answer:
            self._active = None
        answer.done = True
        item = output_item(answer, status)
        self._history.add(item)
        return done_event(answer, item, status, reason, time.monotonic())

    # -- conversation items --------------------------------------------------------------

    async def _on_create_conversation_item(self, request: pb.ConverseRequest) -> None:
        item, previous = self._history.insert(request.create_conversation_item, _new_id("item"))
        if item.role == pb.ITEM_ROLE_USER:
            text = " ".join(part.text or part.transcript for part in item.content).strip()
            self._add_pending(PendingInput(item.id, text=text))
        await self._announce(item, previous)

    async def _on_retrieve_conversation_item(self, request: pb.ConverseRequest) -> None:
        item = self._history.get(request.retrieve_conversation_item.item_id)
        await self._outbox.put(pb.ConverseResponse(item_retrieved=pb.ItemRetrieved(item=item)))

    async def _on_delete_conversation_item(self, request: pb.ConverseRequest) -> None:
        item_id = request.delete_conversation_item.item_id
        self._history.delete(item_id)
        self._pending = [entry for entry in self._pending if entry.item_id != item_id]
        await self._outbox.put(pb.ConverseResponse(item_deleted=pb.ItemDeleted(item_id=item_id)))

    async def _on_truncate_conversation_item(self, request: pb.ConverseRequest) -> None:
        truncate = request.truncate_conversation_item
        self._history.check_truncate(truncate)
        self._cut(truncate.item_id, truncate.audio_end_ms)
        body = pb.ItemTruncated(
            item_id=truncate.item_id, content_index=0, audio_end_ms=truncate.audio_end_ms
        )
        await self._outbox.put(pb.ConverseResponse(item_truncated=body))

    async def _on_ack_playback(self, request: pb.ConverseRequest) -> None:
        ack = request.ack_playback
        answer = find_answer(list(self._answers.values()), ack)
        ack_only = self.config.playback_commit_policy == pb.PLAYBACK_COMMIT_POLICY_ACK_ONLY
        body = acknowledge(answer, ack, ack_only=ack_only)
        if ack.truncate and answer.speaks and answer.item_id in self._history:
            self._cut(answer.item_id, body.committed_ms)
        await self._outbox.put(pb.ConverseResponse(playback_acknowledged=body))

    # -- bookkeeping ---------------------------------------------------------------------

    def _modalities(self) -> Modalities:
        return tuple(self.config.output_modalities) or (pb.MODALITY_AUDIO,)

    def _max_input_bytes(self) -> int:
        return int(self._options.max_input_s * IN_RATE_HZ) * 2

    def _add_pending(self, entry: PendingInput) -> None:
        self._pending.append(entry)
        # Bounded memory: unanswered audio past the cap goes, oldest first.
        while sum(len(e.audio) for e in self._pending) > self._max_input_bytes():
            self._pending.pop(0)

    @staticmethod
    def _user_item(part: pb.ContentPart) -> pb.ConversationItem:
        return pb.ConversationItem(
            id=_new_id("item"),
            role=pb.ITEM_ROLE_USER,
            status=pb.ITEM_STATUS_COMPLETED,
            content=[part],
        )

    def _cut(self, item_id: str, audio_end_ms: float) -> None:
        answer = next((a for a in self._answers.values() if a.item_id == item_id), None)
        self._history.cut(item_id, audio_end_ms, answer.text_at if answer else None)

    async def _announce(self, item: pb.ConversationItem, previous: str) -> None:
        await self._outbox.put(
            pb.ConverseResponse(item_added=pb.ItemAdded(item=item, previous_item_id=previous))
        )
        await self._outbox.put(
            pb.ConverseResponse(item_done=pb.ItemDone(item=item, previous_item_id=previous))
        )
