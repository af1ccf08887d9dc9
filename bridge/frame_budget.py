"""The memory budget before the bytes are decoded: what the frames in flight may cost.

aiohttp reads a websocket frame whole before a relay sees it, and a relay then parses its JSON
and decodes its base64: a 15 MiB append costs about four times its length before its command
leaves for the service. Counted only after that, sixty sockets of one key once took a server
past three times its budget. So each socket's frames are charged from their headers, before
their payload is read (:mod:`bridge.frame_meter`), against one :class:`FrameBudget`: ``COPIES``
times the frame's length, given back when the relay has handed the frame's command on.

A frame does not fit when its key already has frames in flight and its share of the budget
(the tenant policy's ``memory_bytes``, :mod:`omni_grpc.wire.tenant_policy`) would be passed,
or when frames are in flight at all and the server's budget would be; so one frame always
passes when nothing is in flight (no wait on input only its own socket's commands
can free), and the server holds at most its budget plus one frame. Waiting frames are taken in
the order they came, each when its key and the server have room: a key over its share waits
behind the others. A large frame (``LARGE_FRAME_BYTES`` and up) also waits while its key has
another large frame in flight (its loop slices grow with it: see :mod:`bridge.frame_meter`).
With ``audio_wait`` (a service in the same process), a large frame also waits until its key's
audio allowance would take the audio its length can hold, instead of being parsed and refused.

The budget is the service's own when the bridge runs in its process (the same ledgers its
sessions' input is held in); a bridge alone has one of its own (``memory_budget_bytes``). When
a flood has gone through and nothing is in flight, ``on_drained`` runs: the launcher's hands the
free pages of the heap back to the system.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from omni_grpc.wire.tenant_policy import TenantPolicy

# What a frame costs, in multiples of its length: the frame, the parsed JSON's string, the
# decoded audio and the command's copy of it (the last two three quarters each, base64's).
COPIES = 4
# Frames from this length up are checked against their key's audio allowance first.
AUDIO_CHECK_BYTES = 64 * 1024
# Frames from this length up go one at a time per key (a frame's loop slices grow with it).
LARGE_FRAME_BYTES = 1024 * 1024
LARGE_COST = LARGE_FRAME_BYTES * COPIES  # what a large frame is charged at least
# Once frames of this much cost went through and none is in flight, ``on_drained`` runs (the
# launcher's: the allocator gives the free pages of the flood back to the system).
DRAINED_AFTER_BYTES = 64 * 1024 * 1024


class Waiter(Protocol):
    """A frame waiting for room (a socket's :class:`~bridge.frame_meter.FrameMeter`)."""

    def try_go(self) -> bool:
        """Takes its charge and goes on if it fits now; False while it still waits."""
        ...


class Ledger(Protocol):
    """Bytes held against a capacity (the service's MemoryBudget has this shape)."""

    capacity_bytes: int
    held: int


class OwnLedger:
    """A ledger of a bridge's own."""

    __slots__ = ("capacity_bytes", "held")

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.held = 0


def own_budget(
    capacity_bytes: int,
    keys: tuple[str, ...],
    tenants: TenantPolicy,
    on_drained: Callable[[], None] | None = None,
) -> FrameBudget:
    """A bridge's own budget, each key holding at most the ``tenants`` policy's
    ``memory_bytes`` of it (None, as with fewer than two keys: no share of its own)."""
    share_bytes = tenants.memory_bytes
    if share_bytes is None:
        return FrameBudget(OwnLedger(capacity_bytes), _none, on_drained=on_drained)
    ledgers = {key: OwnLedger(share_bytes) for key in keys}
    return FrameBudget(OwnLedger(capacity_bytes), ledgers.get, on_drained=on_drained)


def _none(key: str) -> Ledger | None:
    return None


class FrameBudget:
    """Frames in flight, charged to the server's ledger and to their key's (see the module)."""

    def __init__(
        self,
        server: Ledger,
        key_ledger: Callable[[str], Ledger | None] = _none,
        audio_wait: Callable[[str, int], float] | None = None,
        on_drained: Callable[[], None] | None = None,
    ) -> None:
        self.server = server
        self._on_drained = on_drained
        self._since_drained = 0  # the cost of the frames since on_drained last ran
        self._key_ledger = key_ledger
        self._audio_wait = audio_wait  # seconds until the key's audio allowance takes the bytes
        self.in_flight = 0  # what the frames in flight cost, next to what the ledgers hold
        self.peak = 0  # the most the ledger and the frames ever came to together
        # What each key's frames in flight cost, and how many of them are large: a key with
        # none in flight has no entry (plain dicts: a Counter's missing key and its ``del``
        # are calls of Python, twice per frame).
        self._by_key: dict[str, int] = {}
        self._large_by_key: dict[str, int] = {}
        self._waiting: deque[Waiter] = deque()

    def take(self, key: str, cost: int) -> bool:
        """Charges a frame of ``cost``; False (nothing charged) when it must wait."""
        large = cost >= LARGE_COST
        if large and self._large_by_key.get(key, 0):
            return False
        in_flight, by_key = self.in_flight, self._by_key.get(key, 0)
        ledger = self._key_ledger(key)
        if by_key and ledger is not None and ledger.held + by_key + cost > ledger.capacity_bytes:
            return False
        server = self.server
        if in_flight and server.held + in_flight + cost > server.capacity_bytes:
            return False
        self.in_flight += cost
        self._by_key[key] = by_key + cost
        if large:
            self._large_by_key[key] = self._large_by_key.get(key, 0) + 1
        self._since_drained += cost
        self.peak = max(self.peak, server.held + self.in_flight)
        return True

    def give(self, key: str, cost: int, large: int = 0) -> None:
        """Gives the charge of frames back (``large`` of them large), and lets the frames that
        now fit go, in order."""
        if not cost:
            return
        self.in_flight -= cost
        # (a key with nothing left had an entry: ``cost`` and ``large`` are not 0 here)
        if left := self._by_key.get(key, 0) - cost:
            self._by_key[key] = left
        else:
            del self._by_key[key]
        if large:
            if left := self._large_by_key.get(key, 0) - large:
                self._large_by_key[key] = left
            else:
                del self._large_by_key[key]
        for meter in list(self._waiting):
            if meter.try_go():
                self._waiting.remove(meter)
        if not self.in_flight and self._since_drained >= DRAINED_AFTER_BYTES:
            self._since_drained = 0
            if self._on_drained is not None:
                self._on_drained()

    def audio_wait(self, key: str, audio_bytes: int) -> float:
        """Seconds until ``key``'s audio allowance would take ``audio_bytes`` (0: now)."""
        return self._audio_wait(key, audio_bytes) if self._audio_wait is not None else 0.0

    def wait(self, meter: Waiter) -> None:
        self._waiting.append(meter)

    def stop_waiting(self, meter: Waiter) -> None:
        if meter in self._waiting:
            self._waiting.remove(meter)


__all__ = [
    "AUDIO_CHECK_BYTES",
    "COPIES",
    "LARGE_COST",
    "LARGE_FRAME_BYTES",
    "FrameBudget",
    "Ledger",
    "OwnLedger",
    "Waiter",
    "own_budget",
]
