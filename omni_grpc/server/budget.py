"""The server-wide memory budget: bytes of input audio and output events held for sessions.

One :class:`MemoryBudget` per server counts what sessions make the server hold: appended input
audio the engine buffers until it is committed or cleared (counted in its canonical size, the
form the engine keeps), and serialized events waiting in a stream's send queue. Each session
charges it through its own :class:`SessionCharge`, so that whatever a session still holds when
it ends goes back at once.

Input is what the budget refuses: an append that would take the server past its budget, or its
session past its own share of canonical input (``max_pending_input_bytes``, which the core
checks in wire bytes: 8 kHz G.711 grows fourfold on the way in), is answered with a retryable
``input_backpressure`` error and never reaches the engine, so other sessions keep working.
With the share at most ``memory_budget_bytes / max_sessions`` (``omni-grpc serve`` sees to
it), input alone never fills the budget. Output is counted but never refused here (a send
queue is bounded by its depth, and a reader that falls behind is cut as a slow consumer), so
queued output leaves less room for new input. Input is counted when the client commits its
own turns; with server VAD the engine owns the buffer, drops silence on its own, and bounds it
itself (``max_input_s``).
"""

from __future__ import annotations

from omni_grpc.core.errors import CommandError

# How soon a client refused for the budget may try again: other sessions commit within a turn.
BUDGET_RETRY_AFTER_S = 1.0


class MemoryBudget:
    """The bytes every session together may hold; ``held`` is what they hold now."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.held = 0

    def reserve(self, size: int) -> bool:
        """Takes ``size`` bytes if they fit; False (and nothing taken) when they do not."""
        if self.held + size > self.capacity_bytes:
            return False
        self.held += size
        return True

    def take(self, size: int) -> None:
        """Takes ``size`` bytes even past the capacity (output already owed to a client)."""
        self.held += size

    def give_back(self, size: int) -> None:
        self.held -= size


class SessionCharge:
    """What one session holds against the budget: its uncommitted input and queued output."""

    def __init__(self, budget: MemoryBudget, input_cap_bytes: int) -> None:
        self._budget = budget
        self._input_cap_bytes = input_cap_bytes
        self.input_bytes = 0
        self.output_bytes = 0

    def admit_input(self, size: int) -> None:
        """Charges ``size`` bytes of canonical input; CommandError when they do not fit."""
        if self.input_bytes + size > self._input_cap_bytes:
            raise CommandError(
                "input_backpressure",
                "too much uncommitted input audio; commit or clear first",
                retryable=True,
            )
        if not self._budget.reserve(size):
            raise CommandError(
                "input_backpressure",
                "the server holds as much input audio as it may; commit or clear, or retry",
                retryable=True,
                retry_after_s=BUDGET_RETRY_AFTER_S,
            )
        self.input_bytes += size

    def input_taken(self) -> None:
        """The engine's input buffer was committed or cleared: its bytes go back."""
        self._budget.give_back(self.input_bytes)
        self.input_bytes = 0

    def output_queued(self, size: int) -> None:
        self._budget.take(size)
        self.output_bytes += size

    def output_sent(self, size: int) -> None:
        self._budget.give_back(size)
        self.output_bytes -= size


__all__ = ["BUDGET_RETRY_AFTER_S", "MemoryBudget", "SessionCharge"]
