"""What a durable session's new owner must replay into its fresh engine: the client's input not
yet committed, and the commands the engine had not applied yet (``--durability``).

The store writes a session's state with its ``applied_client_seq``; a peer that adopts the
session tells a resuming client that number, and the client resends only what comes after it.
So the store must be able to reproduce the effect of every command the number covers. Most
effects are in what the store keeps anyway (the core's state, the journal's events, the
conversation items), once the engine has applied the command and its events are published.
Two kinds are not, and a :class:`ReplayLog` keeps them, for the store to write in the same
fenced round as the state whose number covers them:

* **The uncommitted input.** An append's effect is audio in the engine's input buffer. Every
  append goes into the log as it came (its encoding and rate resolved, before the edge converts
  it: replayed through a fresh edge, it becomes the same engine input, the resampler's tail at
  the commit included) and leaves it when the input ends: when the engine has applied the
  commit, clear or cancel that ended it, or, with server VAD, when the engine says it committed
  or cleared the buffer on its own (then the appends it had applied go, later ones stay).
  Bounded by the session's pending input (``max_pending_input_bytes``, counted as the core's
  ledger counts it, in the engine's bytes). With server VAD the core counts nothing and the
  engine bounds its buffer itself: while nobody speaks (before a ``speech_started``, after the
  turn's input_committed or input_cleared) it keeps only the prefix padding, so the log keeps
  only the last :data:`SILENCE_KEPT_BYTES` of such audio, the oldest appends going first.
* **Commands the engine has not applied.** Any other command bound for the engine stays here
  from its admission until the engine says it applied it (the ``applied_client_seq`` marker an
  engine yields when ``EngineSession.report_applied`` is set, after the command's events), or
  at once when the engine applied it on the synchronous path.

The adopter replays both, in ``client_seq`` order, into its fresh engine after the history.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from omni_grpc.core.admission import INPUT_ENDING_COMMANDS
from omni_grpc.core.journal import Journal
from omni_grpc.wire import pb

# With server VAD, what the log keeps while nobody speaks: 2 s of canonical input, far more than
# the prefix padding a detector keeps (300 ms by default) and the onset it waits to confirm.
SILENCE_KEPT_BYTES = 64 * 1024
# Appends to drop from the front of the store's list that empty it, whatever its length.
EMPTY_LIST = 2**31


@dataclass(slots=True)
class _Append:
    seq: int
    payload: bytes  # the ConverseRequest as it came, its format resolved
    size: int  # what the core's ledger counts for it (the engine's bytes)


class ReplayLog:
    """One session's uncommitted appends and unapplied commands; see the module docstring."""

    def __init__(self, bound_bytes: int) -> None:
        self._bound = bound_bytes
        self._appends: collections.deque[_Append] = collections.deque()
        self._held = 0  # the sizes of the appends kept
        self._commands: dict[int, tuple[str, bytes]] = {}  # seq -> (kind, request)
        self.last_applied = 0  # the newest command the engine said it applied
        # What changed since the store last took it (:meth:`take_changes`).
        self._new: list[bytes] = []  # appends the store has not
        self._dropped = 0  # appends the store has and must drop from the front
        self._commands_changed = False
        self._rewrite = False  # the store's list must be written whole (see refused)
        self.speaking = False  # server VAD: between a speech_started and the turn's end

    def __len__(self) -> int:
        return len(self._appends) + len(self._commands)

    def appended(self, request: pb.ConverseRequest, size: int, *, vad: bool = False) -> None:
        """An admitted append, before the edge converts it (``size``: its ledger bytes;
        ``vad``: the engine owns the buffer, server VAD)."""
        payload = request.SerializeToString()
        self._appends.append(_Append(request.client_seq, payload, size))
        self._new.append(payload)
        self._held += size
        bound = self._bound
        if vad and not self.speaking:
            bound = min(bound, SILENCE_KEPT_BYTES)
        while len(self._appends) > 1 and self._held > bound:
            self._drop_first()

    def refused(self, seq: int) -> None:
        """The append numbered ``seq`` never reached the engine (its audio could not be
        decoded): there is nothing of it to replay."""
        if self._appends and self._appends[-1].seq == seq:
            dropped = self._appends.pop()
            self._held -= dropped.size
            if self._new:
                self._new.pop()
            else:  # written already: the store's list is written whole again
                self._rewrite = True

    def rewrite(self) -> None:
        """The store may not hold what it was last given (its round failed): the next write
        gives it the whole log."""
        self._rewrite = True

    def submitted(self, kind: str, request: pb.ConverseRequest) -> None:
        """Another numbered command on its way to the engine."""
        if request.client_seq:
            self._commands[request.client_seq] = (kind, request.SerializeToString())
            self._commands_changed = True

    def applied(self, seq: int) -> None:
        """The engine applied every command up to ``seq``, and its events are published."""
        self.last_applied = max(self.last_applied, seq)
        done = [s for s in self._commands if s <= seq]
        for s in done:
            kind, _ = self._commands.pop(s)
            self._commands_changed = True
            if kind in INPUT_ENDING_COMMANDS:
                self._drop_through(s)

    def input_taken(self) -> None:
        """The engine committed or cleared its buffer (an input_committed or input_cleared
        event). When a command of the client's ended it, that command's own marker drops the
        appends; otherwise (server VAD) the appends the engine had applied go."""
        self.speaking = False
        if not any(kind in INPUT_ENDING_COMMANDS for kind, _ in self._commands.values()):
            self._drop_through(self.last_applied)

    def _drop_through(self, seq: int) -> None:
        while self._appends and self._appends[0].seq <= seq:
            self._drop_first()

    def _drop_first(self) -> None:
        dropped = self._appends.popleft()
        self._held -= dropped.size
        if self._new and len(self._new) > len(self._appends):
            self._new.pop(0)  # never written: nothing to drop from the store
        else:
            self._dropped += 1

    def take_changes(self, whole: bool) -> tuple[int, list[bytes], list[bytes] | None]:
        """What the store must do to hold the log now: (appends to drop from the front of
        its list, -1 to delete the list first; appends to add; the commands, or None when
        unchanged). ``whole``: the store may hold nothing (a first or a fresh write)."""
        if whole or self._rewrite:
            drop = -1 if whole else EMPTY_LIST
            new = [a.payload for a in self._appends]
            commands: list[bytes] | None = [payload for _, payload in self._commands.values()]
        else:
            drop, new = self._dropped, self._new
            commands = (
                [payload for _, payload in self._commands.values()]
                if self._commands_changed
                else None
            )
        self._new, self._dropped, self._commands_changed, self._rewrite = [], 0, False, False
        return drop, new, commands


def speech_in_progress(journal: Journal) -> bool:
    """Whether the journal's last word on speech is a speech_started (a turn under way)."""
    for _, payload in reversed(journal.entries_after(journal.dropped_through)):
        kind = pb.ConverseResponse.FromString(payload).WhichOneof("event")
        if kind == "speech_started":
            return True
        if kind in ("speech_stopped", "input_committed", "input_cleared"):
            return False
    return False


def replay_order(appends: list[bytes], commands: list[bytes]) -> list[pb.ConverseRequest]:
    """The stored appends and commands as requests, in the order the client numbered them."""
    requests = [pb.ConverseRequest.FromString(payload) for payload in (*appends, *commands)]
    return sorted(requests, key=lambda request: request.client_seq)
