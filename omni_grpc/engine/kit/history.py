"""The conversation as an engine session keeps it: a small, ordered, bounded set of items."""

from __future__ import annotations

import collections
from collections.abc import Callable

from omni_grpc.core.commands import CreateItem, TruncateItem
from omni_grpc.core.errors import CommandError
from omni_grpc.wire import pb


def user_item(part: pb.ContentPart, item_id: str) -> pb.ConversationItem:
    """A completed user item holding one part."""
    return pb.ConversationItem(
        id=item_id, role=pb.ITEM_ROLE_USER, status=pb.ITEM_STATUS_COMPLETED, content=[part]
    )


def item_text(item: pb.ConversationItem) -> str:
    """The words of an item: its typed text and its transcripts, joined; for a function item,
    the call or what the function returned, as a model should read it."""
    if item.type == pb.ITEM_TYPE_FUNCTION_CALL:
        return f"(called {item.name} with {item.arguments})"
    if item.type == pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT:
        return f"(the function returned: {item.output})"
    return " ".join(part.text or part.transcript for part in item.content).strip()


class History:
    """Items in conversation order; the oldest go once there are more than ``capacity``."""

    def __init__(self, capacity: int) -> None:
        self._items: collections.OrderedDict[str, pb.ConversationItem] = collections.OrderedDict()
        self._capacity = capacity

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._items

    def ids(self) -> list[str]:
        """The item ids, oldest first."""
        return list(self._items)

    def add(self, item: pb.ConversationItem, after: str = "") -> str:
        """Stores a copy of ``item`` at the end, or right after ``after``; returns its previous.

        An item already there (a finished response's item) moves to its new place.
        """
        stored = pb.ConversationItem()
        stored.CopyFrom(item)
        self._items.pop(item.id, None)
        if not after:
            previous = next(reversed(self._items), "")
            self._items[item.id] = stored
        else:
            previous = after
            entries = list(self._items.items())
            at = [key for key, _ in entries].index(after) + 1
            self._items = collections.OrderedDict([*entries[:at], (item.id, stored), *entries[at:]])
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)
        return previous

    def get(self, item_id: str) -> pb.ConversationItem:
        """The stored item (not a copy); CommandError ``item_not_found`` if there is none."""
        try:
            return self._items[item_id]
        except KeyError:
            raise CommandError("item_not_found", f"no item {item_id}", param="item_id") from None

    def delete(self, item_id: str) -> None:
        """Removes an item; CommandError ``item_not_found`` if there is none."""
        self.get(item_id)
        del self._items[item_id]

    def insert(self, create: CreateItem, new_id: str) -> tuple[pb.ConversationItem, str]:
        """Checks and stores an item a client made; returns the stored item and its previous."""
        item = pb.ConversationItem()
        item.CopyFrom(create.item)
        item.id = item.id or new_id
        if item.id in self._items:
            raise CommandError("bad_event", f"item {item.id} already exists", param="item.id")
        if create.previous_item_id and create.previous_item_id not in self._items:
            raise CommandError(
                "item_not_found", f"no item {create.previous_item_id}", param="previous_item_id"
            )
        # A function call is the model's; its output, like a message, the user's side.
        made_by_model = item.type == pb.ITEM_TYPE_FUNCTION_CALL
        item.role = item.role or (pb.ITEM_ROLE_ASSISTANT if made_by_model else pb.ITEM_ROLE_USER)
        item.status = pb.ITEM_STATUS_COMPLETED
        previous = self.add(item, after=create.previous_item_id)
        return item, previous

    def check_truncate(self, truncate: TruncateItem) -> None:
        """Refuses a truncate of anything but the audio of an assistant item, within it."""
        item = self.get(truncate.item_id)
        audio_part = bool(item.content) and item.content[0].type == pb.CONTENT_TYPE_OUTPUT_AUDIO
        if item.role != pb.ITEM_ROLE_ASSISTANT or truncate.content_index != 0 or not audio_part:
            raise CommandError(
                "bad_event",
                "only the audio part (content_index 0) of an assistant item can be truncated",
                param="item_id",
            )
        if truncate.audio_end_ms > item.content[0].audio_duration_ms:
            raise CommandError(
                "bad_event",
                "audio_end_ms is past the end of the item's audio",
                param="audio_end_ms",
            )

    def cut(
        self, item_id: str, audio_end_ms: float, text_at: Callable[[float], str] | None
    ) -> None:
        """Cuts an assistant audio item to ``audio_end_ms``, and its transcript to match."""
        item = self.get(item_id)
        part = item.content[0]
        part.audio_duration_ms = min(part.audio_duration_ms, audio_end_ms)
        if text_at is not None:
            part.transcript = text_at(part.audio_duration_ms)
        item.status = pb.ITEM_STATUS_INCOMPLETE
