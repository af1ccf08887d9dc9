"""The lifecycle of a session, as a table.

A session is born ATTACHED to the stream that opened it. Its stream can go away (DETACHED) and
a new stream can resume it (ATTACHED again, with a new attachment generation); a resume while
another stream is still attached is a takeover and also lands in ATTACHED. It ends exactly once,
CLOSED (a client or the server closed it) or EXPIRED (its disconnect grace or idle timeout ran
out). Ending states have no way out, which is what makes "exactly one terminal event" hold
whatever races: a second close, an expiry after a close, a resume after an expiry, all find no
row in the table and are refused before they can emit anything.

::

                 resume (takeover)
                 ┌──────┐
                 ▼      │
    open ──► ATTACHED ──┘ ─────────── detach ───────────► DETACHED
                │  ▲                                        │
                │  └──────────────── resume ────────────────┘
                │ close / expire                             │ close / expire
                ▼                                            ▼
           CLOSED | EXPIRED   ◄──────────────────────────────┘
"""

from __future__ import annotations

import enum

from omni_grpc.wire import pb


class State(enum.Enum):
    """Where a session is in its life."""

    ATTACHED = pb.SESSION_STATE_ATTACHED
    DETACHED = pb.SESSION_STATE_DETACHED
    CLOSED = pb.SESSION_STATE_CLOSED
    EXPIRED = pb.SESSION_STATE_EXPIRED

    @property
    def terminal(self) -> bool:
        """Says whether the session has ended."""
        return self in (State.CLOSED, State.EXPIRED)


class Trigger(enum.Enum):
    """What moves a session from one state to another."""

    DETACH = "detach"
    RESUME = "resume"
    CLOSE = "close"
    EXPIRE = "expire"


TRANSITIONS: dict[tuple[State, Trigger], State] = {
    (State.ATTACHED, Trigger.DETACH): State.DETACHED,
    (State.ATTACHED, Trigger.RESUME): State.ATTACHED,
    (State.ATTACHED, Trigger.CLOSE): State.CLOSED,
    (State.ATTACHED, Trigger.EXPIRE): State.EXPIRED,
    (State.DETACHED, Trigger.RESUME): State.ATTACHED,
    (State.DETACHED, Trigger.CLOSE): State.CLOSED,
    (State.DETACHED, Trigger.EXPIRE): State.EXPIRED,
}


class IllegalTransition(Exception):
    """The core tried a move the table does not have: a bug, never a client's fault."""


def next_state(state: State, trigger: Trigger) -> State:
    """Looks the move up in the table."""
    try:
        return TRANSITIONS[(state, trigger)]
    except KeyError:
        raise IllegalTransition(f"{trigger.value} is not allowed in {state.name}") from None
