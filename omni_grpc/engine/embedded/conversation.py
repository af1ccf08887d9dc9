"""The response and conversation-item half of an embedded session.

Kept apart from the input half (:mod:`.session`) to keep each file readable; both run on
the session's worker, which is the only writer of this state (the player task updates the
progress counters of the one response it plays).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine
from typing import Any

from omni_grpc.core.errors import CommandError
from omni_grpc.engine.embedded.listening import Listener
from omni_grpc.engine.embedded.models import Runtime
from omni_grpc.engine.embedded.speaking import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    Performer,
    Speech,
    UserTurn,
)
from omni_grpc.engine.loopback.history import History
from omni_grpc.engine.loopback.outbox import Outbox
from omni_grpc.engine.loopback.turns import acknowledge, done_event, find_answer, output_item
from omni_grpc.wire import pb

_ANSWERS_KEPT = 16  # responses that ack_playback and clear_output_audio can name
_MAX_PENDING_TURNS = 32  # committed turns waiting for an answer


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


class Conversation:
    """Responses, the history they read and write, and the commands about them."""

    id: str
    config: pb.SessionConfig
    _runtime: Runtime
    _outbox: Outbox
    _listener: Listener
    _history: History
    _pending: list[UserTurn]
    _answers: dict[str, Speech]
    _active: Speech | None
    _player: asyncio.Task[None] | None
    _deferred: bool
    _tasks: set[asyncio.Task[None]]
    _responder: str
    _realtime: bool

    # -- starting and ending responses ---------------------------------------------------

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
        await self._respond(
            auto=False,
            turn_started=time.monotonic(),
            modalities=tuple(create.output_modalities),
            instructions=create.instructions if create.HasField("instructions") else None,
        )

    async def _respond(
        self,
        *,
        auto: bool,
        turn_started: float,
        modalities: tuple[pb.Modality.ValueType, ...] = (),
        instructions: str | None = None,
    ) -> None:
        """Answers the pending turns now, or after the active response under listen_only."""
        if self._active is not None:
            listen_only = auto and (
                self.config.overlap_policy == pb.OVERLAP_POLICY_LISTEN_ONLY
                or not self.config.turn_detection.interrupt_response
            )
            if listen_only:
                self._deferred = True
                return
            await self._cancel(self._active, "turn_detected")  # the user took the turn
        if self._player is not None:  # the last answer may still be queueing its done event
            await asyncio.wait([self._player])
        inputs, self._pending = self._pending, []
        speech = Speech(
            id=new_id("resp"),
            item_id=new_id("item"),
            turn_started=turn_started,
            modalities=modalities or tuple(self.config.output_modalities) or (pb.MODALITY_AUDIO,),
            input_audio_ms=sum(len(turn.audio) / 32 for turn in inputs),
            input_tokens=0,
            output=b"",
            transcript="",
            inputs=inputs,
            auto=auto,
            instructions=self.config.instructions if instructions is None else instructions,
            voice=self.config.voice or self._runtime.options.voice,
        )
        self._active = speech
        self._answers[speech.id] = speech
        while len(self._answers) > _ANSWERS_KEPT:
            del self._answers[next(iter(self._answers))]
        self._player = asyncio.create_task(self._play(speech), name=f"embedded-{speech.id}")

    async def _play(self, speech: Speech) -> None:
        performer = Performer(self._runtime, self._outbox, realtime=self._realtime)
        config = self.config
        played = await performer.run(
            speech,
            self._runtime.responder(self._responder),
            self._conversation,
            max_tokens=config.max_output_tokens
            if config.HasField("max_output_tokens")
            else DEFAULT_MAX_TOKENS,
            temperature=config.temperature
            if config.HasField("temperature")
            else DEFAULT_TEMPERATURE,
        )
        if not played:
            self._active = None if self._active is speech else self._active
            speech.done = True
        else:
            incomplete = speech.finish == "max_output_tokens"
            status = pb.RESPONSE_STATUS_INCOMPLETE if incomplete else pb.RESPONSE_STATUS_COMPLETED
            await self._outbox.put(self._finish(speech, status, speech.finish))
        await self._start_deferred()

    async def _start_deferred(self) -> None:
        if self._deferred and self._active is None and self._pending:
            self._deferred = False
            self._player = None  # this task is the old player: it must not wait for itself
            await self._respond(auto=True, turn_started=time.monotonic())

    def _conversation(self) -> list[tuple[str, str]]:
        """The history as the responder reads it: (role, text), oldest first.

        Under ``ack_only`` an assistant turn counts only as far as the client played it.
        """
        ack_only = self.config.playback_commit_policy == pb.PLAYBACK_COMMIT_POLICY_ACK_ONLY
        by_item = {speech.item_id: speech for speech in self._answers.values()}
        turns: list[tuple[str, str]] = []
        for item_id in self._history.ids():
            item = self._history.get(item_id)
            text = " ".join(part.text or part.transcript for part in item.content).strip()
            if item.role == pb.ITEM_ROLE_ASSISTANT:
                speech = by_item.get(item_id)
                if ack_only and speech is not None and speech.speaks:
                    text = speech.text_at(speech.played_ms).strip()
                role = "assistant"
            else:
                role = "user"
            if text:
                turns.append((role, text))
        return turns

    async def _cancel(
        self, speech: Speech, reason: str, first: pb.ConverseResponse | None = None
    ) -> None:
        if self._player is not None and not self._player.done():
            self._player.cancel()
            await asyncio.wait([self._player])
        # Output the reader has not taken never reaches the client: take it back and count it
        # as unsent (it is the newest output, so its text is the end of sent_text).
        unsent_chars = 0
        for event in self._outbox.take_back(speech.id):
            kind = event.WhichOneof("event")
            if kind == "output_audio_delta":
                speech.sent_ms = min(speech.sent_ms, event.output_audio_delta.start_ms)
            elif kind in ("output_audio_transcript_delta", "output_text_delta"):
                unsent_chars += len(getattr(event, kind).delta)
        speech.sent_text = speech.sent_text[: len(speech.sent_text) - unsent_chars]
        if first is not None:
            await self._outbox.put(first)
        if not speech.announced:  # it never started: nothing to end, its turns wait again
            self._pending = speech.inputs + self._pending
            self._active = None if self._active is speech else self._active
            speech.done = True
            return
        await self._outbox.put(self._finish(speech, pb.RESPONSE_STATUS_CANCELLED, reason))

    def _finish(
        self, speech: Speech, status: pb.ResponseStatus.ValueType, reason: str
    ) -> pb.ConverseResponse:
        if self._active is speech:
            self._active = None
        speech.done = True
        item = output_item(speech, status)
        self._history.add(item)
        event = done_event(speech, item, status, reason, time.monotonic())
        # Tokens, not words: the responder counted them.
        event.response_done.response.usage.output_tokens = speech.output_tokens
        return event

    def _require_active(self, response_id: str) -> Speech:
        if self._active is None:
            raise CommandError("response_not_active", "no response is running")
        if response_id and response_id != self._active.id:
            raise CommandError(
                "response_not_active", f"response {response_id} is not running", param="response_id"
            )
        return self._active

    async def _on_cancel_response(self, request: pb.ConverseRequest) -> None:
        speech = self._require_active(request.cancel_response.response_id)
        await self._cancel(speech, "client_cancelled")
        await self._start_deferred()

    async def _on_barge_in(self, request: pb.ConverseRequest) -> None:
        speech = self._require_active("")
        self._listener.reset()  # what the user said over the assistant is dropped too
        await self._cancel(speech, "barge_in")

    async def _on_clear_output_audio(self, request: pb.ConverseRequest) -> None:
        named = request.clear_output_audio.response_id
        finished = self._answers.get(named)
        cleared = pb.ConverseResponse(output_audio_cleared=pb.OutputAudioCleared(response_id=named))
        if finished is not None and finished.done:  # nothing runs here; the client's copy stops
            await self._outbox.put(cleared)
            return
        speech = self._require_active(named)
        cleared.output_audio_cleared.response_id = speech.id
        await self._cancel(speech, "output_audio_cleared", first=cleared)
        await self._start_deferred()

    # -- conversation items --------------------------------------------------------------

    async def _on_create_conversation_item(self, request: pb.ConverseRequest) -> None:
        item, previous = self._history.insert(request.create_conversation_item, new_id("item"))
        if item.role == pb.ITEM_ROLE_USER:
            text = " ".join(part.text or part.transcript for part in item.content).strip()
            turn = UserTurn(item.id, previous, text=text)
            turn.transcribed.set()
            self._add_pending(turn)
        await self._announce(item, previous)

    async def _on_retrieve_conversation_item(self, request: pb.ConverseRequest) -> None:
        item = self._history.get(request.retrieve_conversation_item.item_id)
        await self._outbox.put(pb.ConverseResponse(item_retrieved=pb.ItemRetrieved(item=item)))

    async def _on_delete_conversation_item(self, request: pb.ConverseRequest) -> None:
        item_id = request.delete_conversation_item.item_id
        self._history.delete(item_id)
        self._pending = [turn for turn in self._pending if turn.item_id != item_id]
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
        speech = find_answer(list(self._answers.values()), ack)
        ack_only = self.config.playback_commit_policy == pb.PLAYBACK_COMMIT_POLICY_ACK_ONLY
        body = acknowledge(speech, ack, ack_only=ack_only)
        if ack.truncate and speech.speaks and speech.item_id in self._history:
            self._cut(speech.item_id, body.committed_ms)
        await self._outbox.put(pb.ConverseResponse(playback_acknowledged=body))

    # -- bookkeeping ---------------------------------------------------------------------

    def _add_pending(self, turn: UserTurn) -> None:
        self._pending.append(turn)
        # Bounded memory: the oldest unanswered turns go first.
        del self._pending[: max(0, len(self._pending) - _MAX_PENDING_TURNS)]

    @staticmethod
    def _user_item(part: pb.ContentPart, item_id: str = "") -> pb.ConversationItem:
        return pb.ConversationItem(
            id=item_id or new_id("item"),
            role=pb.ITEM_ROLE_USER,
            status=pb.ITEM_STATUS_COMPLETED,
            content=[part],
        )

    def _cut(self, item_id: str, audio_end_ms: float) -> None:
        speech = next((s for s in self._answers.values() if s.item_id == item_id), None)
        self._history.cut(item_id, audio_end_ms, speech.text_at if speech else None)

    async def _announce(self, item: pb.ConversationItem, previous: str) -> None:
        await self._outbox.put(
            pb.ConverseResponse(item_added=pb.ItemAdded(item=item, previous_item_id=previous))
        )
        await self._outbox.put(
            pb.ConverseResponse(item_done=pb.ItemDone(item=item, previous_item_id=previous))
        )

    def _spawn(self, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(job)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
