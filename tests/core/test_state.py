"""The lifecycle table: every (state, trigger) pair, spelled out."""

from __future__ import annotations

import itertools

import pytest

from omni_grpc.core.state import TRANSITIONS, IllegalTransition, State, Trigger, next_state
from omni_grpc.wire import pb

A, D, C, E = State.ATTACHED, State.DETACHED, State.CLOSED, State.EXPIRED
EXPECTED: dict[tuple[State, Trigger], State | None] = {
    (A, Trigger.DETACH): D,
    (A, Trigger.RESUME): A,  # a takeover
    (A, Trigger.CLOSE): C,
    (A, Trigger.EXPIRE): E,
    (D, Trigger.DETACH): None,  # a second disconnect must not restart the grace window
    (D, Trigger.RESUME): A,
    (D, Trigger.CLOSE): C,
    (D, Trigger.EXPIRE): E,
    # An ending state has no way out: this is what makes the terminal event unique.
    **{(end, trigger): None for end in (C, E) for trigger in Trigger},
}


def test_the_expected_table_covers_every_pair() -> None:
    assert set(EXPECTED) == set(itertools.product(State, Trigger))


@pytest.mark.parametrize(("state", "trigger"), list(EXPECTED))
def test_transition(state: State, trigger: Trigger) -> None:
    expected = EXPECTED[(state, trigger)]
    if expected is None:
        with pytest.raises(
            IllegalTransition, match=f"^{trigger.value} is not allowed in {state.name}$"
        ):
            next_state(state, trigger)
        assert (state, trigger) not in TRANSITIONS
    else:
        assert next_state(state, trigger) is expected


@pytest.mark.parametrize(
    ("state", "terminal", "wire"),
    [
        (A, False, pb.SESSION_STATE_ATTACHED),
        (D, False, pb.SESSION_STATE_DETACHED),
        (C, True, pb.SESSION_STATE_CLOSED),
        (E, True, pb.SESSION_STATE_EXPIRED),
    ],
)
def test_states_map_onto_the_wire(state: State, terminal: bool, wire: int) -> None:
    assert state.terminal is terminal
    assert state.value == wire
