"""The journal of a session's outbound events, which makes resume exact.

Every event that belongs to the session's history is numbered as it is produced: ``seq`` 1, 2,
3 … with no gaps, and kept as the serialized bytes that went (or would have gone) on the wire,
so a replay resends the very same bytes. Entries leave the journal in three ways:

* the client acknowledges them (``ack``): it has them, so they are no longer needed;
* they grow older than the window (``ttl_s``), whether acknowledged or not;
* never by eviction for space. When an event would push the journal past ``max_bytes`` the
  journal *overflows*: it stops numbering for good and the session tells the client so once
  (``resync_required``). Silently dropping old entries would turn a later resume into silent loss.

A resume asks for everything after the last ``seq`` the client received. If any of that has
left the journal (acknowledged, aged out, or never numbered because of an overflow) the answer
is a :class:`JournalGap` and the client must start over; a replay is all or nothing.
"""

from __future__ import annotations

from collections import deque

from omni_grpc.wire import pb


class JournalGap(Exception):
    """The events after a cursor cannot all be replayed."""

    def __init__(self, reason: pb.ResyncReason.ValueType, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class CursorAhead(Exception):
    """A cursor names an event that was never produced."""


class Journal:
    """A bounded, time-windowed log of one session's numbered events."""

    __slots__ = (
        "_entries",
        "next_seq",
        "_bytes",
        "_dropped_through",
        "overflowed",
        "ttl_s",
        "max_bytes",
    )

    def __init__(self, *, ttl_s: float, max_bytes: int) -> None:
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        # (seq, produced_at, payload); seq is contiguous, so entry i has seq first_seq + i.
        self._entries: deque[tuple[int, float, bytes]] = deque()
        self.next_seq = 1  # the seq the next recorded event gets
        self._bytes = 0
        # Every seq at or below this has left the journal; replaying from before it is a gap.
        self._dropped_through = 0
        self.overflowed = False

    @property
    def head(self) -> int:
        """The seq of the newest event ever numbered (0 before the first)."""
        return self.next_seq - 1

    @property
    def retained_bytes(self) -> int:
        """The payload bytes held now."""
        return self._bytes

    @property
    def dropped_through(self) -> int:
        """Every seq at or below this has left the journal (acknowledged or aged out)."""
        return self._dropped_through

    def __len__(self) -> int:
        return len(self._entries)

    def entries_after(self, seq: int) -> list[tuple[int, bytes]]:
        """The (seq, payload) of every kept event after ``seq``, oldest first (for a store),
        read from the newest end: a store asks for what it has not written yet, a few events,
        after every one of them, and a journal nobody acknowledges holds thousands."""
        newer = []
        for entry_seq, _, payload in reversed(self._entries):
            if entry_seq <= seq:
                break
            newer.append((entry_seq, payload))
        newer.reverse()
        return newer

    def newest_after(self, seq: int) -> list[tuple[int, float, bytes]]:
        """The (seq, produced_at, payload) of every kept event after ``seq``, oldest first,
        read from the newest end: cheap when few are newer (a recorder following the journal)."""
        newer = []
        for entry in reversed(self._entries):
            if entry[0] <= seq:
                break
            newer.append(entry)
        newer.reverse()
        return newer

    def newest(self) -> tuple[int, float, bytes] | None:
        """The newest kept event, (seq, produced_at, payload), or None: what a recorder reads
        after each command when the command made one event, the usual chunk's."""
        return self._entries[-1] if self._entries else None

    def restore(self, dropped_through: int, entries: list[tuple[int, bytes]], now: float) -> None:
        """Refills an empty journal from a store: events after ``dropped_through``, contiguous.

        Restored events are dated ``now`` (their age on the lost replica is not known). Raises
        ValueError for entries that are not contiguous from ``dropped_through + 1``.
        """
        expected = dropped_through + 1
        for entry_seq, payload in entries:
            if entry_seq != expected:
                raise ValueError(f"restored journal expected seq {expected}, got {entry_seq}")
            self._entries.append((entry_seq, now, payload))
            self._bytes += len(payload)
            expected += 1
        self._dropped_through = dropped_through
        self.next_seq = expected

    def record(self, payload: bytes, now: float) -> bool:
        """Keeps ``payload`` as event ``next_seq``; False (and overflowed) if it does not fit.

        The caller has already written ``next_seq`` into the payload.
        """
        if self.overflowed:
            return False
        entries = self._entries
        if entries and entries[0][1] < now - self.ttl_s:  # the usual event finds none too old
            self._prune(now)
        size = len(payload)
        if self._bytes + size > self.max_bytes:
            self.overflowed = True
            return False
        entries.append((self.next_seq, now, payload))
        self.next_seq += 1
        self._bytes += size
        return True

    def ack(self, seq: int) -> int:
        """Forgets every event up to ``seq``; returns how many left. Raises ValueError if ahead."""
        if seq > self.head:
            raise ValueError(f"seq {seq} is ahead of the newest event {self.head}")
        removed = 0
        while self._entries and self._entries[0][0] <= seq:
            self._bytes -= len(self._entries.popleft()[2])
            removed += 1
        self._dropped_through = max(self._dropped_through, seq)
        return removed

    def replay_after(self, seq: int, now: float) -> list[bytes]:
        """Returns the payloads of every event after ``seq``, in order, or raises JournalGap."""
        self._prune(now)
        if self.overflowed:
            raise JournalGap(pb.RESYNC_REASON_JOURNAL_OVERFLOW, "the journal overflowed")
        if seq > self.head:
            raise CursorAhead(f"seq {seq} is ahead of the newest event {self.head}")
        if seq < self._dropped_through:
            raise JournalGap(
                pb.RESYNC_REASON_JOURNAL_GAP,
                f"events after {seq} are no longer kept (kept from {self._dropped_through + 1})",
            )
        return [payload for entry_seq, _, payload in self._entries if entry_seq > seq]

    def _prune(self, now: float) -> None:
        horizon = now - self.ttl_s
        while self._entries and self._entries[0][1] < horizon:
            entry_seq, _, payload = self._entries.popleft()
            self._bytes -= len(payload)
            self._dropped_through = entry_seq
