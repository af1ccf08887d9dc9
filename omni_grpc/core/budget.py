"""The server-wide memory budget: bytes of input audio and output events held for sessions.

One :class:`MemoryBudget` per server (the registry's) counts what sessions make the server
hold: uncommitted input audio, in the form the engine keeps it (canonical pcm16 at 16 kHz, or
pcm16 at a rate the engine takes natively: 8 kHz G.711 counts four times its wire size), and
serialized events waiting in a stream's send queue. Input is what the budget refuses, in one
place (``admission.py``, with the session's own share); output is counted but never refused
(a send queue is bounded by its depth, and a reader that falls behind is cut as a slow
consumer), so queued output leaves less room for new input. Both add and take their bytes
straight on :attr:`MemoryBudget.held`: once per chunk, no call.
"""

from __future__ import annotations

# How soon a client refused for the budget may try again: other sessions commit within a turn.
BUDGET_RETRY_AFTER_S = 1.0


class MemoryBudget:
    """The bytes every session together may hold; ``held`` is what they hold now."""

    __slots__ = ("capacity_bytes", "held")

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.held = 0

    def __repr__(self) -> str:
        return f"MemoryBudget(held={self.held}, capacity_bytes={self.capacity_bytes})"


__all__ = ["BUDGET_RETRY_AFTER_S", "MemoryBudget"]
