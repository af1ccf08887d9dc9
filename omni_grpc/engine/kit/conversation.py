"""The conversation session: the input, responses and items every engine handles the same way.

A :class:`ConversationSession` is a :class:`~.worker.WorkerSession` with a handler for every
engine command. An engine subclasses it and supplies what is its own: :meth:`_play`, which
produces one response's output, and, where it hears differently, the input handlers (server
VAD replaces the plain input buffer kept here).

The response lifecycle: a committed turn or ``create_response`` makes an :class:`Answer` of
the pending user input and starts a player task for it. Only one response runs at a time. A
cancel (``cancel_response``, ``barge_in``, ``clear_output_audio``, ``cancel_input``, or a new
turn, which cancels with reason ``turn_detected``) stops the player and waits for it, takes
back the output the reader has not taken, and only then queues ``response_done``: nothing of a
response follows its end. The answer is marked done, synchronously, right before its done
event is queued, so a cancel that comes later finds nothing to cancel instead of ending a
response twice. A turn that server VAD detects while a response runs under ``listen_only``
(or without ``interrupt_response``) waits instead, and is answered when that response ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import ClassVar, Protocol, Self

from omni_grpc.core.errors import CommandError
from omni_grpc.engine.kit.answers import (
    Answer,
    Modalities,
    Outcome,
    UserInput,
    acknowledge,
    done_event,
    find_answer,
    new_id,
    output_item,
)
from omni_grpc.engine.kit.history import History, item_text, user_item
from omni_grpc.engine.kit.worker import Handler, WorkerSession
from omni_grpc.wire import pb
from omni_grpc.wire.audio import (
    CANONICAL_INPUT_RATE_HZ,
    PCM16_WIDTH,
    pcm16_bytes,
    pcm16_ms,
)

ITEMS_KEPT = 64  # conversation items that retrieve, delete, truncate and a model can reach
ANSWERS_KEPT = 16  # responses that ack_playback and clear_output_audio can name
PENDING_KEPT = 32  # committed user items waiting for an answer


def check_canonical_input(append: pb.AppendInputAudio) -> None:
    """Refuses audio that is not canonical input; the core should not have let it through."""
    encoding = append.encoding or pb.AUDIO_ENCODING_PCM16
    rate_hz = append.sample_rate_hz or CANONICAL_INPUT_RATE_HZ
    if encoding != pb.AUDIO_ENCODING_PCM16 or rate_hz != CANONICAL_INPUT_RATE_HZ:
        raise CommandError(
            "unsupported_audio_format",
            "engines take canonical input: pcm16 at 16 kHz",
            param="encoding",
        )
    if len(append.audio) % PCM16_WIDTH:
        raise CommandError("bad_audio", "pcm16 needs an even number of bytes", param="audio")


class SessionOptions(Protocol):
    """What the kit reads of an engine's options (the engines' option classes have these)."""

    @property
    def queue_size(self) -> int:
        """The bound of each session's command and event queues."""

    @property
    def max_input_s(self) -> float:
        """The most input audio kept, uncommitted or unanswered."""


class ConversationSession(WorkerSession):
    """Input, responses and items for one conversation; see the module docstring."""

    # Whether response_created goes out when a response starts; an engine that first waits
    # for something (transcripts) announces from its player with _announce_response.
    announce_at_start: ClassVar[bool] = True

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        options: SessionOptions,
        on_close: Callable[[Self], None],
    ) -> None:
        super().__init__(session_id, config, queue_size=options.queue_size, on_close=on_close)
        self._max_input_bytes = pcm16_bytes(options.max_input_s * 1000, CANONICAL_INPUT_RATE_HZ)
        self._input = bytearray()  # uncommitted canonical input
        self._pending: list[UserInput] = []  # committed, not answered yet
        self._history = History(ITEMS_KEPT)
        self._answers: dict[str, Answer] = {}  # insertion-ordered, newest last
        self._active: Answer | None = None
        self._deferred = False  # a detected turn waits for the active response (listen_only)

    def _command_handlers(self) -> dict[str, Handler]:
        return {
            "update_session": self._on_update_session,
            "append_input_audio": self._on_append_input_audio,
            "commit_input_audio": self._on_commit_input_audio,
            "clear_input_audio": self._on_clear_input_audio,
            "cancel_input": self._on_cancel_input,
            "append_input_text": self._on_append_input_text,
            "create_response": self._on_create_response,
            "cancel_response": self._on_cancel_response,
            "barge_in": self._on_barge_in,
            "clear_output_audio": self._on_clear_output_audio,
            "create_conversation_item": self._on_create_conversation_item,
            "retrieve_conversation_item": self._on_retrieve_conversation_item,
            "delete_conversation_item": self._on_delete_conversation_item,
            "truncate_conversation_item": self._on_truncate_conversation_item,
            "ack_playback": self._on_ack_playback,
        }

    async def _play(self, answer: Answer) -> Outcome | None:
        """Produces the output of ``answer``; returns how it ended, or None if it became a
        listen (nothing was announced, and nothing ends). Runs as the player task."""
        raise NotImplementedError

    # -- input ---------------------------------------------------------------------------

    def _on_update_session(self, request: pb.ConverseRequest) -> None:
        self.config = request.update_session.config

    def _on_append_input_audio(self, request: pb.ConverseRequest) -> None:
        append = request.append_input_audio
        check_canonical_input(append)
        if len(self._input) + len(append.audio) > self._max_input_bytes:
            raise CommandError("input_backpressure", "too much uncommitted input", retryable=True)
        self._input += append.audio

    async def _on_commit_input_audio(self, request: pb.ConverseRequest) -> None:
        turn_started = time.monotonic()
        if not self._input:
            raise CommandError("input_audio_buffer_empty", "there is no input audio to commit")
        audio = bytes(self._input)
        self._input.clear()
        user, item = await self._commit_turn(audio)
        await self._events.put(
            pb.ConverseResponse(
                item_done=pb.ItemDone(item=item, previous_item_id=user.previous_item_id)
            )
        )
        if self._creates_response(request.commit_input_audio):
            await self._take_turn(turn_started)

    async def _commit_turn(
        self, audio: bytes, item_id: str = "", *, text_final: bool = True
    ) -> tuple[UserInput, pb.ConversationItem]:
        """Makes committed audio a pending user item; queues input_committed and item_added
        (item_done is the caller's, once the item's words are known)."""
        length_ms = pcm16_ms(len(audio), CANONICAL_INPUT_RATE_HZ)
        part = pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_AUDIO, audio_duration_ms=length_ms)
        item = user_item(part, item_id or new_id("item"))
        previous = self._history.add(item)
        user = UserInput(item.id, previous, audio=audio)
        if not text_final:
            user.text_final.clear()
        self._add_pending(user)
        await self._events.put(
            pb.ConverseResponse(
                input_committed=pb.InputCommitted(
                    item_id=item.id, previous_item_id=previous, audio_duration_ms=length_ms
                )
            )
        )
        await self._events.put(
            pb.ConverseResponse(item_added=pb.ItemAdded(item=item, previous_item_id=previous))
        )
        return user, item

    def _creates_response(self, commit: pb.CommitInputAudio | None = None) -> bool:
        """Whether a commit (or a turn server VAD ended) is answered at once: as the commit
        says; unset, as turn detection says; unset there too, yes."""
        if commit is not None and commit.HasField("create_response"):
            return commit.create_response
        detection = self.config.turn_detection
        return detection.create_response if detection.HasField("create_response") else True

    def _clear_input(self) -> None:
        """Drops the uncommitted input."""
        self._input.clear()

    async def _on_clear_input_audio(self, request: pb.ConverseRequest) -> None:
        self._clear_input()
        await self._events.put(pb.ConverseResponse(input_cleared=pb.InputCleared()))

    async def _on_cancel_input(self, request: pb.ConverseRequest) -> None:
        self._clear_input()
        if self._active is not None:
            await self._cancel(self._active, "barge_in")
        await self._events.put(pb.ConverseResponse(input_cleared=pb.InputCleared()))

    async def _on_append_input_text(self, request: pb.ConverseRequest) -> None:
        text = request.append_input_text.text
        part = pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text=text)
        item = user_item(part, new_id("item"))
        previous = self._history.add(item)
        self._add_pending(UserInput(item.id, previous, text=text))
        await self._announce_item(item, previous)

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
        await self._start_response(
            time.monotonic(),
            tuple(create.output_modalities) or self._modalities(),
            create.instructions if create.HasField("instructions") else None,
        )

    async def _take_turn(self, turn_started: float, *, by_server_vad: bool = False) -> None:
        """Answers a turn that asks for it: a running response gives way (the user took the
        turn), except that a detected turn waits for it under listen_only."""
        if self._active is not None:
            config = self.config
            if by_server_vad and (
                config.overlap_policy == pb.OVERLAP_POLICY_LISTEN_ONLY
                or not config.turn_detection.interrupt_response
            ):
                self._deferred = True
                return
            await self._cancel(self._active, "turn_detected")
        await self._start_response(turn_started, self._modalities(), by_server_vad=by_server_vad)

    async def _start_response(
        self,
        turn_started: float,
        modalities: Modalities,
        instructions: str | None = None,
        *,
        by_server_vad: bool = False,
    ) -> None:
        """Makes the pending input an answer and starts its player."""
        player = self._player
        if player is not None and player is not asyncio.current_task():
            await asyncio.wait([player])  # the last answer may still be queueing its done event
        inputs, self._pending = self._pending, []
        answer = Answer(
            id=new_id("resp"),
            item_id=new_id("item"),
            turn_started=turn_started,
            modalities=modalities,
            inputs=inputs,
            instructions=self._default_instructions() if instructions is None else instructions,
            voice=self.config.voice,
            by_server_vad=by_server_vad,
        )
        self._prepare(answer)
        self._active = answer
        self._answers[answer.id] = answer
        while len(self._answers) > ANSWERS_KEPT:
            del self._answers[next(iter(self._answers))]
        if self.announce_at_start:
            await self._announce_response(answer)
        self._player = asyncio.create_task(
            self._perform(answer), name=f"{self.engine_name}-{answer.id}"
        )

    def _default_instructions(self) -> str:
        """The instructions of a response that names none."""
        return self.config.instructions

    def _prepare(self, answer: Answer) -> None:
        """Adds what the engine knows to a new answer, before it is announced."""

    async def _announce_response(self, answer: Answer) -> None:
        created = pb.Response(
            id=answer.id, status=pb.RESPONSE_STATUS_IN_PROGRESS, output_modalities=answer.modalities
        )
        await self._events.put(
            pb.ConverseResponse(
                response_created=pb.ResponseCreated(response=created, item_id=answer.item_id)
            )
        )
        answer.announced = True

    async def _perform(self, answer: Answer) -> None:
        outcome = await self._play(answer)
        if outcome is None:
            self._drop(answer)
        else:
            await self._events.put(self._finish(answer, outcome))
        await self._start_deferred()

    async def _start_deferred(self) -> None:
        if self._deferred and self._active is None and self._pending:
            self._deferred = False
            await self._start_response(time.monotonic(), self._modalities(), by_server_vad=True)

    async def _cancel(
        self, answer: Answer, reason: str, first: pb.ConverseResponse | None = None
    ) -> None:
        """Ends ``answer`` as cancelled, after ``first`` if given; see the module docstring."""
        if self._player is not None and not self._player.done():
            self._player.cancel()
            await asyncio.wait([self._player])
        # Output the reader has not taken never reaches the client.
        answer.take_back(self._events.take_back(answer.id))
        if first is not None:
            await self._events.put(first)
        if not answer.announced:  # it never started: nothing to end, its turns wait again
            self._pending = answer.inputs + self._pending
            self._drop(answer)
            return
        await self._events.put(self._finish(answer, (pb.RESPONSE_STATUS_CANCELLED, reason)))

    def _drop(self, answer: Answer) -> None:
        """Ends an answer that was never announced, silently."""
        if self._active is answer:
            self._active = None
        answer.done = True

    def _finish(self, answer: Answer, outcome: Outcome) -> pb.ConverseResponse:
        """Ends ``answer``: its item enters history; returns its done event, to be queued
        right away."""
        self._drop(answer)
        item = output_item(answer, outcome[0])
        self._history.add(item)
        return done_event(answer, item, outcome, time.monotonic())

    def _require_active(self, response_id: str) -> Answer:
        if self._active is None:
            raise CommandError("response_not_active", "no response is running")
        if response_id and response_id != self._active.id:
            raise CommandError(
                "response_not_active", f"response {response_id} is not running", param="response_id"
            )
        return self._active

    async def _on_cancel_response(self, request: pb.ConverseRequest) -> None:
        answer = self._require_active(request.cancel_response.response_id)
        await self._cancel(answer, "client_cancelled")
        await self._start_deferred()

    async def _on_barge_in(self, request: pb.ConverseRequest) -> None:
        await self._cancel(self._require_active(""), "barge_in")

    async def _on_clear_output_audio(self, request: pb.ConverseRequest) -> None:
        named = request.clear_output_audio.response_id
        finished = self._answers.get(named)
        cleared = pb.ConverseResponse(output_audio_cleared=pb.OutputAudioCleared(response_id=named))
        if finished is not None and finished.done:  # nothing runs here; the client's copy stops
            await self._events.put(cleared)
            return
        answer = self._require_active(named)
        cleared.output_audio_cleared.response_id = answer.id
        await self._cancel(answer, "output_audio_cleared", first=cleared)
        await self._start_deferred()

    # -- conversation items --------------------------------------------------------------

    async def _on_create_conversation_item(self, request: pb.ConverseRequest) -> None:
        item, previous = self._history.insert(request.create_conversation_item, new_id("item"))
        if item.role == pb.ITEM_ROLE_USER:
            self._add_pending(UserInput(item.id, previous, text=item_text(item)))
        await self._announce_item(item, previous)

    async def _on_retrieve_conversation_item(self, request: pb.ConverseRequest) -> None:
        item = self._history.get(request.retrieve_conversation_item.item_id)
        await self._events.put(pb.ConverseResponse(item_retrieved=pb.ItemRetrieved(item=item)))

    async def _on_delete_conversation_item(self, request: pb.ConverseRequest) -> None:
        item_id = request.delete_conversation_item.item_id
        self._history.delete(item_id)
        self._pending = [user for user in self._pending if user.item_id != item_id]
        await self._events.put(pb.ConverseResponse(item_deleted=pb.ItemDeleted(item_id=item_id)))

    async def _on_truncate_conversation_item(self, request: pb.ConverseRequest) -> None:
        truncate = request.truncate_conversation_item
        self._history.check_truncate(truncate)
        self._cut(truncate.item_id, truncate.audio_end_ms)
        body = pb.ItemTruncated(
            item_id=truncate.item_id, content_index=0, audio_end_ms=truncate.audio_end_ms
        )
        await self._events.put(pb.ConverseResponse(item_truncated=body))

    async def _on_ack_playback(self, request: pb.ConverseRequest) -> None:
        ack = request.ack_playback
        answer = find_answer(list(self._answers.values()), ack)
        body = acknowledge(answer, ack, ack_only=self._ack_only())
        if ack.truncate and answer.speaks and answer.item_id in self._history:
            self._cut(answer.item_id, body.committed_ms)
        await self._events.put(pb.ConverseResponse(playback_acknowledged=body))

    # -- bookkeeping ---------------------------------------------------------------------

    def _modalities(self) -> Modalities:
        return tuple(self.config.output_modalities) or (pb.MODALITY_AUDIO,)

    def _ack_only(self) -> bool:
        return self.config.playback_commit_policy == pb.PLAYBACK_COMMIT_POLICY_ACK_ONLY

    def _add_pending(self, user: UserInput) -> None:
        self._pending.append(user)
        # Bounded memory: past either bound the oldest unanswered input goes, never the newest.
        del self._pending[: max(0, len(self._pending) - PENDING_KEPT)]
        while len(self._pending) > 1 and (
            sum(len(u.audio) for u in self._pending) > self._max_input_bytes
        ):
            self._pending.pop(0)

    def _cut(self, item_id: str, audio_end_ms: float) -> None:
        answer = next((a for a in self._answers.values() if a.item_id == item_id), None)
        self._history.cut(item_id, audio_end_ms, answer.text_at if answer else None)

    async def _announce_item(self, item: pb.ConversationItem, previous: str) -> None:
        await self._events.put(
            pb.ConverseResponse(item_added=pb.ItemAdded(item=item, previous_item_id=previous))
        )
        await self._events.put(
            pb.ConverseResponse(item_done=pb.ItemDone(item=item, previous_item_id=previous))
        )

    def _heard(self) -> list[tuple[pb.ConversationItem, str]]:
        """Each item of history with its words as a model should read them, oldest first.

        Under ``ack_only`` an assistant answer counts only as far as the client played it.
        """
        by_item = {answer.item_id: answer for answer in self._answers.values()}
        heard = []
        for item_id in self._history.ids():
            item = self._history.get(item_id)
            text = item_text(item)
            answer = by_item.get(item_id) if item.role == pb.ITEM_ROLE_ASSISTANT else None
            if self._ack_only() and answer is not None and answer.speaks:
                text = answer.text_at(answer.played_ms).strip()
            heard.append((item, text))
        return heard
