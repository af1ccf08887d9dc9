"""The conversation-item half of a vllm session: items, playback acks, the prompt's view.

Kept apart from the command and response half (:mod:`.session`) to keep each file readable;
both run on the session's worker, which is the only writer of this state.
"""

from __future__ import annotations

import collections
import uuid

from omni_grpc.engine.loopback.history import History
from omni_grpc.engine.loopback.outbox import Outbox
from omni_grpc.engine.loopback.turns import acknowledge, find_answer
from omni_grpc.engine.vllm.options import VllmOptions
from omni_grpc.engine.vllm.prompt import Entry
from omni_grpc.engine.vllm.speaking import Reply
from omni_grpc.wire import pb

_MAX_PENDING = 32  # committed items waiting for an answer


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


class Conversation:
    """Conversation items and what the prompt makes of them."""

    config: pb.SessionConfig
    _options: VllmOptions
    _outbox: Outbox
    _history: History
    _answers: dict[str, Reply]
    _pending: list[str]
    _pending_audio_ms: float
    _heard: collections.OrderedDict[str, bytes]

    # -- conversation items --------------------------------------------------------------

    async def _on_create_conversation_item(self, request: pb.ConverseRequest) -> None:
        item, previous = self._history.insert(request.create_conversation_item, new_id("item"))
        if item.role == pb.ITEM_ROLE_USER:
            self._add_pending(item.id, 0.0)
        await self._announce(item, previous)

    async def _on_retrieve_conversation_item(self, request: pb.ConverseRequest) -> None:
        item = self._history.get(request.retrieve_conversation_item.item_id)
        await self._outbox.put(pb.ConverseResponse(item_retrieved=pb.ItemRetrieved(item=item)))

    async def _on_delete_conversation_item(self, request: pb.ConverseRequest) -> None:
        item_id = request.delete_conversation_item.item_id
        self._history.delete(item_id)
        self._heard.pop(item_id, None)
        self._pending = [pending for pending in self._pending if pending != item_id]
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
        reply = find_answer(list(self._answers.values()), ack)
        body = acknowledge(reply, ack, ack_only=self._ack_only())
        if ack.truncate and reply.speaks and reply.item_id in self._history:
            self._cut(reply.item_id, body.committed_ms)
        await self._outbox.put(pb.ConverseResponse(playback_acknowledged=body))

    # -- bookkeeping ---------------------------------------------------------------------

    def _entries(self) -> list[Entry]:
        """The latest ``history_items`` items as the prompt sees them, oldest first.

        Under ``ack_only`` an assistant answer counts only as far as the client played it.
        """
        replies = {reply.item_id: reply for reply in self._answers.values()}
        entries = []
        for item_id in self._history.ids()[-self._options.history_items :]:
            item = self._history.get(item_id)
            text = " ".join(part.text or part.transcript for part in item.content).strip()
            if item.role == pb.ITEM_ROLE_ASSISTANT:
                reply = replies.get(item_id)
                if self._ack_only() and reply is not None and reply.speaks:
                    text = reply.text_at(reply.played_ms).strip()
                entries.append(Entry("assistant", text))
            else:
                entries.append(Entry("user", text, self._heard.get(item_id, b"")))
        return entries

    def _ack_only(self) -> bool:
        return self.config.playback_commit_policy == pb.PLAYBACK_COMMIT_POLICY_ACK_ONLY

    def _modalities(self) -> tuple[pb.Modality.ValueType, ...]:
        return tuple(self.config.output_modalities) or (pb.MODALITY_AUDIO,)

    def _keep_audio(self, item_id: str, pcm16: bytes) -> None:
        self._heard[item_id] = pcm16
        # Bounded memory: the prompt hears at most audio_turns items; a few spare ones
        # stand in for items the client deletes.
        while len(self._heard) > 2 * self._options.audio_turns:
            self._heard.popitem(last=False)

    def _add_pending(self, item_id: str, audio_ms: float) -> None:
        self._pending.append(item_id)
        self._pending_audio_ms += audio_ms
        del self._pending[: max(0, len(self._pending) - _MAX_PENDING)]

    @staticmethod
    def _user_item(part: pb.ContentPart) -> pb.ConversationItem:
        return pb.ConversationItem(
            id=new_id("item"),
            role=pb.ITEM_ROLE_USER,
            status=pb.ITEM_STATUS_COMPLETED,
            content=[part],
        )

    def _cut(self, item_id: str, audio_end_ms: float) -> None:
        reply = next((r for r in self._answers.values() if r.item_id == item_id), None)
        self._history.cut(item_id, audio_end_ms, reply.text_at if reply else None)

    async def _announce(self, item: pb.ConversationItem, previous: str) -> None:
        await self._outbox.put(
            pb.ConverseResponse(item_added=pb.ItemAdded(item=item, previous_item_id=previous))
        )
        await self._outbox.put(
            pb.ConverseResponse(item_done=pb.ItemDone(item=item, previous_item_id=previous))
        )
