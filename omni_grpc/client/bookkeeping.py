"""Client-side bookkeeping that makes a resume exact, with no I/O.

Two cursors meet in a resume. Outbound, the :class:`CommandJournal` (the mirror of the server's
event journal) keeps every numbered command until the server reports (``applied_client_seq`` on
any event) that it applied it; after a resume exactly the commands above the server's number
are sent again, so each command is applied once whatever the connection lost. Inbound, the
:class:`EventCursor` remembers the last journaled event received, which is where the resume
asks the replay to start, and drops the duplicates a replay may bring.
"""

from __future__ import annotations

from collections import deque

from omni_grpc.wire import pb


class EventGap(Exception):
    """An event skipped ahead of the cursor: the server lost events it had numbered."""


class CommandJournalFull(Exception):
    """A command does not fit the journal until the server confirms older ones."""


class CommandJournal:
    """Numbered commands the server has not confirmed, bounded by count and by bytes."""

    __slots__ = ("_entries", "_bytes", "_next_seq", "max_commands", "max_bytes")

    def __init__(self, *, max_commands: int, max_bytes: int, next_seq: int = 1) -> None:
        if max_commands < 1 or max_bytes < 1:
            raise ValueError("the journal needs room for at least one command")
        if next_seq < 1:
            raise ValueError("client_seq counts from 1")
        self.max_commands = max_commands
        self.max_bytes = max_bytes
        # (client_seq, request, size); client_seq is contiguous from the oldest entry.
        self._entries: deque[tuple[int, pb.ConverseRequest, int]] = deque()
        self._bytes = 0
        self._next_seq = next_seq

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def next_seq(self) -> int:
        """The client_seq the next command gets."""
        return self._next_seq

    @property
    def last_seq(self) -> int:
        """The client_seq of the newest command numbered so far (0 before the first)."""
        return self._next_seq - 1

    @property
    def retained_bytes(self) -> int:
        """The serialized size of the commands held."""
        return self._bytes

    def has_room(self, size: int) -> bool:
        """Says whether a command of ``size`` bytes fits now.

        An empty journal takes any command, so one command larger than the byte bound is
        still sendable (the server's message limit, not this bound, decides about it).
        """
        if not self._entries:
            return True
        return len(self._entries) < self.max_commands and self._bytes + size <= self.max_bytes

    def number(self, request: pb.ConverseRequest) -> int:
        """Gives ``request`` the next client_seq and keeps it; raises CommandJournalFull if full."""
        size = request.ByteSize()
        if not self.has_room(size):
            raise CommandJournalFull(
                f"{len(self._entries)} commands ({self._bytes} bytes) unconfirmed"
            )
        seq = self._next_seq
        request.client_seq = seq
        self._entries.append((seq, request, request.ByteSize()))
        self._bytes += self._entries[-1][2]
        self._next_seq += 1
        return seq

    def trim(self, applied: int) -> int:
        """Forgets every command the server applied (client_seq <= ``applied``)."""
        removed = 0
        while self._entries and self._entries[0][0] <= applied:
            self._bytes -= self._entries.popleft()[2]
            removed += 1
        return removed

    def pending_after(self, applied: int) -> list[pb.ConverseRequest]:
        """The commands to send again after a resume whose server applied up to ``applied``."""
        if applied > self.last_seq:
            raise ValueError(
                f"the server applied client_seq {applied}, beyond the newest "
                f"command numbered here ({self.last_seq})"
            )
        self.trim(applied)
        return [request for _, request, _ in self._entries]


class EventCursor:
    """The last journaled event received, and the filter that keeps the stream exact."""

    __slots__ = ("last_seq", "duplicates")

    def __init__(self, last_seq: int = 0) -> None:
        if last_seq < 0:
            raise ValueError("seq is never negative")
        self.last_seq = last_seq
        self.duplicates = 0

    def admit(self, seq: int) -> bool:
        """Says whether an event with ``seq`` is new; raises EventGap if it skips ahead.

        ``seq`` 0 marks events outside the journal (handshakes, warnings, events after an
        overflow): each is delivered once because it is only ever sent once.
        """
        if seq == 0:
            return True
        if seq <= self.last_seq:
            self.duplicates += 1
            return False
        if seq != self.last_seq + 1:
            raise EventGap(f"event seq {seq} follows {self.last_seq}")
        self.last_seq = seq
        return True
