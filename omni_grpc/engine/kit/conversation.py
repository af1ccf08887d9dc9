"""The conversation session: the input and the items every engine handles the same way.

A :class:`ConversationSession` is a :class:`~.responses.ResponseSession` with a handler for
every engine command: the plain input buffer (append, commit, clear), typed input, and the
conversation items (create, retrieve, delete, truncate, playback ack). An engine subclasses
it and supplies what is its own: :meth:`~.responses.ResponseSession._play`, which produces
one response's output, and, where it hears differently, its own input handlers in the
dispatch table (server VAD replaces the plain buffer kept here), and :meth:`_heard_item` for a
user item created with its audio.

The audio of the newest user items (committed turns, items created with audio) is kept, at
most :data:`ITEM_AUDIO_KEPT_MS` of it, so that a retrieved item comes back with its audio.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
from collections.abc import Callable
from typing import Protocol, Self

from omni_grpc.core import commands as cmd
from omni_grpc.core.errors import CommandError
from omni_grpc.engine.kit.answers import UserInput, acknowledge, find_answer, new_id
from omni_grpc.engine.kit.clock import MONOTONIC, Clock
from omni_grpc.engine.kit.denoise import Denoiser
from omni_grpc.engine.kit.history import item_text, user_item
from omni_grpc.engine.kit.responses import ResponseSession
from omni_grpc.engine.kit.worker import Handler, Handlers
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, PCM16_WIDTH, pcm16_bytes, pcm16_ms

PENDING_KEPT = 32  # committed user items waiting for an answer
# The audio of the newest user items kept for item_retrieved (Capabilities.item_audio_kept_ms):
# 30 s of canonical input, 960 KB a session.
ITEM_AUDIO_KEPT_MS = 30_000
_ITEM_AUDIO_KEPT_BYTES = pcm16_bytes(ITEM_AUDIO_KEPT_MS, CANONICAL_INPUT_RATE_HZ)


def assert_canonical_input(append: cmd.AppendAudio) -> None:
    """Asserts (a debug check, not a validation) that an append is canonical input.

    The core admitted the append once, format and whole samples included, and the edge made it
    canonical (``omni_grpc.core.admission``): an engine trusts that, and anything else reaching
    it is a bug of the server's, not the client's error.
    """
    assert (append.encoding or pb.AUDIO_ENCODING_PCM16) == pb.AUDIO_ENCODING_PCM16, append.encoding
    assert (append.rate_hz or CANONICAL_INPUT_RATE_HZ) == CANONICAL_INPUT_RATE_HZ
    assert not len(append.audio) % PCM16_WIDTH, "torn pcm16 samples"


class SessionOptions(Protocol):
    """What the kit reads of an engine's options (the engines' option classes have these)."""

    @property
    def queue_size(self) -> int:
        """The bound of each session's command and event queues."""

    @property
    def max_input_s(self) -> float:
        """The most input audio kept, uncommitted or unanswered."""


class ConversationSession(ResponseSession):
    """Input and items for one conversation; see the module docstring."""

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        options: SessionOptions,
        on_close: Callable[[Self], None],
        *,
        clock: Clock = MONOTONIC,
    ) -> None:
        super().__init__(
            session_id, config, clock=clock, queue_size=options.queue_size, on_close=on_close
        )
        self._max_input_bytes = pcm16_bytes(options.max_input_s * 1000, CANONICAL_INPUT_RATE_HZ)
        self._input = bytearray()  # uncommitted canonical input
        # The audio of the newest user items, by item id, oldest first (ITEM_AUDIO_KEPT_MS).
        self._kept_audio: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        # The session's noise reduction (SessionConfig.noise_reduction), made at its first
        # append with it on, and dropped when an update turns it off.
        self._denoiser: Denoiser | None = None

    async def close(self) -> None:
        await super().close()
        # What the ended session held goes now, not when the collector finds its cycles (after
        # a flood of large appends that was most of the process's memory, for minutes).
        self._input = bytearray()
        self._pending = []
        self._kept_audio.clear()
        self._denoiser = None  # freed with its last reference (a thread may be in it)

    def _command_handlers(self) -> Handlers:
        return {
            cmd.UpdateSession: self._on_update_session,
            cmd.AppendAudio: self._on_append_input_audio,
            cmd.CommitAudio: self._on_commit_input_audio,
            cmd.ClearAudio: self._on_clear_input_audio,
            cmd.CancelInput: self._on_cancel_input,
            cmd.AppendText: self._on_append_input_text,
            cmd.CreateResponse: self._on_create_response,
            cmd.CancelResponse: self._on_cancel_response,
            cmd.BargeIn: self._on_barge_in,
            cmd.ClearOutput: self._on_clear_output_audio,
            cmd.CreateItem: self._on_create_conversation_item,
            cmd.RetrieveItem: self._on_retrieve_conversation_item,
            cmd.DeleteItem: self._on_delete_conversation_item,
            cmd.TruncateItem: self._on_truncate_conversation_item,
            cmd.AckPlayback: self._on_ack_playback,
        }

    # -- input ---------------------------------------------------------------------------

    def _input_stage(self, table: Handlers) -> Handlers:
        hear = table.get(cmd.AppendAudio)
        if hear is None:
            return table
        return {**table, cmd.AppendAudio: self._denoising(hear)}

    def _denoising(self, hear: Handler) -> Handler:
        """``hear`` given the session's input after its noise reduction: the denoised audio of
        the whole frames an append completes; an append that completes none is held by the
        denoiser and heard with the next (the detector and recogniser never see the noise).

        Under an engine whose handler is a coroutine (one that hears speech itself) RNNoise
        runs on a thread, off the event loop (1 ms or more a frame); the worker waits for it,
        so the appends stay in order. A plain handler (the synchronous path) runs it in place.
        """
        if inspect.iscoroutinefunction(hear):

            async def hear_later(append: cmd.AppendAudio) -> None:
                denoiser = self._denoiser_for(append)
                if denoiser is None:
                    await hear(append)
                    return
                audio = await asyncio.to_thread(denoiser.process, append.audio)
                if audio:
                    await hear(append._replace(audio=audio))

            return hear_later

        def hear_now(append: cmd.AppendAudio) -> None:
            denoiser = self._denoiser_for(append)
            if denoiser is None:
                hear(append)
                return
            audio = denoiser.process(append.audio)
            if audio:
                hear(append._replace(audio=audio))

        return hear_now

    def _denoiser_for(self, append: cmd.AppendAudio) -> Denoiser | None:
        """The session's denoiser as its configuration now says (None: off). One turned off
        is only let go: a thread may still be in it, and it frees RNNoise's state when the
        last reference goes."""
        kind = self.config.noise_reduction.type
        if kind in (pb.NOISE_REDUCTION_TYPE_UNSPECIFIED, pb.NOISE_REDUCTION_TYPE_OFF):
            self._denoiser = None
            return None
        assert_canonical_input(append)
        denoiser = self._denoiser
        if denoiser is None:
            denoiser = self._denoiser = Denoiser(kind)
        elif denoiser.kind != kind:
            denoiser.configure(kind)
        return denoiser

    def _on_update_session(self, update: cmd.UpdateSession) -> None:
        self.config = update.config

    def _on_append_input_audio(self, append: cmd.AppendAudio) -> None:
        audio = append.audio
        assert_canonical_input(append)
        # A hard cap of the engine's own, not the pending-input rule (the core's, in one
        # ledger): it holds where the core counts nothing (server VAD) and against a bug.
        if len(self._input) + len(audio) > self._max_input_bytes:
            raise CommandError("input_backpressure", "too much uncommitted input", retryable=True)
        self._input += audio

    async def _on_commit_input_audio(self, commit: cmd.CommitAudio) -> None:
        turn_started = self._clock.now()
        if not self._input:
            raise CommandError("input_audio_buffer_empty", "there is no input audio to commit")
        audio = bytes(self._input)
        self._input.clear()
        user, item = await self._commit_turn(audio)
        await self._write_down(user, item)
        await self._events.put(
            pb.ConverseResponse(
                item_done=pb.ItemDone(item=item, previous_item_id=user.previous_item_id)
            )
        )
        if self._creates_response(commit):
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
        self._keep_audio(item.id, audio)
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

    async def _write_down(self, user: UserInput, item: pb.ConversationItem) -> None:
        """Hook: a committed turn, before its item_done; an engine that transcribes it here
        queues its transcript events and puts the words in ``item`` and ``user``."""

    def _creates_response(self, commit: cmd.CommitAudio | None = None) -> bool:
        """Whether a commit (or a turn server VAD ended) is answered at once: as the commit
        says; unset, as turn detection says; unset there too, yes."""
        if commit is not None and commit.create_response is not None:
            return commit.create_response
        detection = self.config.turn_detection
        return detection.create_response if detection.HasField("create_response") else True

    def _clear_input(self) -> None:
        """Drops the uncommitted input."""
        self._input.clear()

    async def _on_clear_input_audio(self, clear: cmd.ClearAudio) -> None:
        self._clear_input()
        await self._events.put(pb.ConverseResponse(input_cleared=pb.InputCleared()))

    async def _on_cancel_input(self, cancel: cmd.CancelInput) -> None:
        self._clear_input()
        if self._active is not None:
            await self._cancel(self._active, "barge_in")
        await self._events.put(pb.ConverseResponse(input_cleared=pb.InputCleared()))

    async def _on_append_input_text(self, append: cmd.AppendText) -> None:
        text = append.text
        part = pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text=text)
        item = user_item(part, new_id("item"))
        previous = self._history.add(item)
        self._add_pending(UserInput(item.id, previous, text=text))
        await self._announce_item(item, previous)

    # -- conversation items --------------------------------------------------------------

    async def _on_create_conversation_item(self, create: cmd.CreateItem) -> None:
        audio = create.item.content[0].audio if create.item.content else b""
        if audio:
            await self._create_audio_item(create, audio)
            return
        item, previous = self._history.insert(create, new_id("item"))
        if item.type == pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT:  # answered by the next response
            self._add_pending(UserInput(item.id, previous, text=item.output, call_output=True))
        elif item.role == pb.ITEM_ROLE_USER and item.type != pb.ITEM_TYPE_FUNCTION_CALL:
            self._add_pending(UserInput(item.id, previous, text=item_text(item)))
        await self._announce_item(item, previous)

    async def _create_audio_item(self, create: cmd.CreateItem, audio: bytes) -> None:
        """A user item created with its audio (canonical input; the core let only a user's
        single input_audio part carry it): stored without its bytes, kept for retrieval, and
        pending as a committed turn is, then heard (:meth:`_heard_item`)."""
        if len(audio) > self._max_input_bytes:  # the engine's own cap, as on the buffer
            raise CommandError("input_backpressure", "too much input audio", retryable=True)
        stored = pb.ConversationItem()
        stored.CopyFrom(create.item)
        part = stored.content[0]
        part.ClearField("audio")
        part.audio_duration_ms = pcm16_ms(len(audio), CANONICAL_INPUT_RATE_HZ)
        item, previous = self._history.insert(create._replace(item=stored), new_id("item"))
        user = UserInput(item.id, previous, audio=audio, text=item_text(item))
        self._keep_audio(item.id, audio)
        self._add_pending(user)
        await self._heard_item(user, item)

    async def _heard_item(self, user: UserInput, item: pb.ConversationItem) -> None:
        """Lets the engine hear a user item created with its audio; by default it is done at
        once (its transcript, if the client gave one, is its words). An engine that
        transcribes writes it down, as it does a committed turn."""
        await self._announce_item(item, user.previous_item_id)

    async def restore_history(self, items: list[pb.ConversationItem]) -> None:
        """Adopted from another replica: the items become history. Those after the last
        item a response made (the user's, or a function's output) wait for an answer, as they
        did there: the next response answers them (a committed turn's audio is not in the
        store, its transcript is, when it had one)."""
        waiting: list[UserInput] = []
        for item in items:
            previous = self._history.add(item)
            if item.role == pb.ITEM_ROLE_ASSISTANT or item.type == pb.ITEM_TYPE_FUNCTION_CALL:
                waiting = []  # answered: what came before it waits no more
            elif item.type == pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT:
                waiting.append(UserInput(item.id, previous, text=item.output, call_output=True))
            elif item.role == pb.ITEM_ROLE_USER:
                waiting.append(UserInput(item.id, previous, text=item_text(item)))
        for user in waiting:
            self._add_pending(user)

    async def _on_retrieve_conversation_item(self, retrieve: cmd.RetrieveItem) -> None:
        item = self._history.get(retrieve.item_id)
        kept = self._kept_audio.get(item.id)
        if kept and item.content and item.content[0].type == pb.CONTENT_TYPE_INPUT_AUDIO:
            with_audio = pb.ConversationItem()
            with_audio.CopyFrom(item)
            with_audio.content[0].audio = kept  # canonical input; the edge converts it
            item = with_audio
        await self._events.put(pb.ConverseResponse(item_retrieved=pb.ItemRetrieved(item=item)))

    async def _on_delete_conversation_item(self, delete: cmd.DeleteItem) -> None:
        item_id = delete.item_id
        self._history.delete(item_id)
        self._kept_audio.pop(item_id, None)
        self._pending = [user for user in self._pending if user.item_id != item_id]
        await self._events.put(pb.ConverseResponse(item_deleted=pb.ItemDeleted(item_id=item_id)))

    async def _on_truncate_conversation_item(self, truncate: cmd.TruncateItem) -> None:
        self._history.check_truncate(truncate)
        self._cut(truncate.item_id, truncate.audio_end_ms)
        body = pb.ItemTruncated(
            item_id=truncate.item_id, content_index=0, audio_end_ms=truncate.audio_end_ms
        )
        await self._events.put(pb.ConverseResponse(item_truncated=body))

    async def _on_ack_playback(self, ack: cmd.AckPlayback) -> None:
        # An ack that names no response is about the conversation's newest, never one out of
        # band (which the client names when it plays one).
        answers = [a for a in self._answers.values() if ack.response_id or not a.out_of_band]
        answer = find_answer(answers, ack)
        body = acknowledge(answer, ack, ack_only=self._ack_only())
        if answer.hold.held:  # the listener says where it stopped hearing the paused reply
            answer.hold.acked = True
        if ack.truncate and answer.speaks and answer.item_id in self._history:
            self._cut(answer.item_id, body.committed_ms)
        await self._events.put(pb.ConverseResponse(playback_acknowledged=body))

    # -- bookkeeping ---------------------------------------------------------------------

    def _add_pending(self, user: UserInput) -> None:
        self._pending.append(user)
        # Bounded memory: past either bound the oldest unanswered input goes, never the newest.
        del self._pending[: max(0, len(self._pending) - PENDING_KEPT)]
        while len(self._pending) > 1 and (
            sum(len(u.audio) for u in self._pending) > self._max_input_bytes
        ):
            self._pending.pop(0)

    def _kept_item_audio(self, item_id: str) -> bytes:
        return self._kept_audio.get(item_id, b"")

    def _keep_audio(self, item_id: str, audio: bytes) -> None:
        """Keeps a user item's audio for retrieval; past the bound the oldest goes (an item
        longer than the whole bound is not kept)."""
        self._kept_audio[item_id] = audio
        total = sum(len(kept) for kept in self._kept_audio.values())
        while total > _ITEM_AUDIO_KEPT_BYTES:
            total -= len(self._kept_audio.popitem(last=False)[1])

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
