"""The turn state table: every (turn state, event kind) pair spelled out; sessions follow it."""

from __future__ import annotations

import itertools

import pytest

from omni_grpc.core.responses import (
    TURN_EVENTS,
    TURN_TRANSITIONS,
    TurnState,
    next_turn,
)
from omni_grpc.core.state import IllegalTransition
from omni_grpc.wire import pb

from .helpers import created, done, open_session

IDLE, USER, ASSISTANT, OVERLAP = (
    TurnState.IDLE,
    TurnState.USER_SPEAKING,
    TurnState.ASSISTANT_RESPONDING,
    TurnState.OVERLAP,
)
EXPECTED: dict[tuple[TurnState, str], TurnState | None] = {
    (IDLE, "speech_started"): USER,
    (IDLE, "speech_stopped"): IDLE,
    (IDLE, "input_committed"): IDLE,
    (IDLE, "input_cleared"): IDLE,
    (IDLE, "response_created"): ASSISTANT,
    (IDLE, "response_done"): None,  # no response is running, so none can end
    (USER, "speech_started"): USER,
    (USER, "speech_stopped"): IDLE,
    (USER, "input_committed"): IDLE,  # the user's turn is an item now
    (USER, "input_cleared"): IDLE,
    (USER, "response_created"): ASSISTANT,
    (USER, "response_done"): None,
    (ASSISTANT, "speech_started"): OVERLAP,
    (ASSISTANT, "speech_stopped"): ASSISTANT,
    (ASSISTANT, "input_committed"): ASSISTANT,
    (ASSISTANT, "input_cleared"): ASSISTANT,
    (ASSISTANT, "response_created"): ASSISTANT,
    (ASSISTANT, "response_done"): IDLE,
    (OVERLAP, "speech_started"): OVERLAP,
    # Heard while the assistant went on: the floor goes back to it.
    (OVERLAP, "speech_stopped"): ASSISTANT,
    (OVERLAP, "input_committed"): ASSISTANT,
    (OVERLAP, "input_cleared"): ASSISTANT,
    (OVERLAP, "response_created"): ASSISTANT,
    (OVERLAP, "response_done"): USER,  # a barge-in: the response is over, the user still speaks
}


def test_the_expected_table_covers_every_pair() -> None:
    assert set(EXPECTED) == set(itertools.product(TurnState, TURN_EVENTS))


def test_the_table_moves_on_these_kinds() -> None:
    assert {
        "speech_started",
        "speech_stopped",
        "input_committed",
        "input_cleared",
        "response_created",
        "response_done",
    } == TURN_EVENTS


@pytest.mark.parametrize(("turn", "kind"), list(EXPECTED))
def test_transition(turn: TurnState, kind: str) -> None:
    expected = EXPECTED[(turn, kind)]
    if expected is None:
        with pytest.raises(IllegalTransition, match=f"^{kind} is not allowed in {turn.name}$"):
            next_turn(turn, kind)
        assert (turn, kind) not in TURN_TRANSITIONS
    else:
        assert next_turn(turn, kind) is expected


@pytest.mark.parametrize(
    ("turn", "wire"),
    [
        (IDLE, pb.TURN_STATE_IDLE),
        (USER, pb.TURN_STATE_USER_SPEAKING),
        (ASSISTANT, pb.TURN_STATE_ASSISTANT_RESPONDING),
        (OVERLAP, pb.TURN_STATE_USER_SPEAKING),  # the wire does not tell an overlap apart
    ],
)
def test_turn_states_map_onto_the_wire(turn: TurnState, wire: int) -> None:
    assert turn.wire == wire


STARTED = pb.ConverseResponse(speech_started=pb.SpeechStarted())
STOPPED = pb.ConverseResponse(speech_stopped=pb.SpeechStopped())
COMMITTED = pb.ConverseResponse(input_committed=pb.InputCommitted())
CLEARED = pb.ConverseResponse(input_cleared=pb.InputCleared())
TURNS: list[tuple[str, list[pb.ConverseResponse], TurnState]] = [
    ("the user speaks", [STARTED], USER),
    ("the user speaks and stops", [STARTED, STOPPED], IDLE),
    ("the user speaks and the input is cleared", [STARTED, CLEARED], IDLE),
    ("a response starts", [created("r1")], ASSISTANT),
    ("input is committed while a response runs", [created("r1"), COMMITTED], ASSISTANT),
    ("the response ends", [created("r1"), done("r1")], IDLE),
    ("another response ends", [created("r1"), done("r0")], ASSISTANT),
    ("the user speaks over a response", [created("r1"), STARTED], OVERLAP),
    ("the user stops while the response goes on", [created("r1"), STARTED, STOPPED], ASSISTANT),
    (
        "a barge-in cancels the response",
        [created("r1"), STARTED, done("r1", pb.RESPONSE_STATUS_CANCELLED)],
        USER,
    ),
    (
        "the user stops after a barge-in",
        [created("r1"), STARTED, done("r1", pb.RESPONSE_STATUS_CANCELLED), STOPPED],
        IDLE,
    ),
]
# An id-less response is malformed; the core must not trip over it.
WITHOUT_IDS: list[tuple[str, list[pb.ConverseResponse], TurnState]] = [
    ("a response without an id never ends as the running one", [created(""), done("")], ASSISTANT),
    ("an ending without an id moves nothing", [STARTED, done("")], USER),
]


@pytest.mark.parametrize(
    ("events", "turn"),
    [case[1:] for case in TURNS + WITHOUT_IDS],
    ids=[case[0] for case in TURNS + WITHOUT_IDS],
)
def test_the_session_follows_the_table(events: list[pb.ConverseResponse], turn: TurnState) -> None:
    s = open_session().session
    for event in events:
        s.publish(event, now=0.0)
    assert s.responses.turn is turn
    assert s.view().turn_state == turn.wire


@pytest.mark.parametrize("events", [case[1] for case in TURNS], ids=[case[0] for case in TURNS])
def test_a_response_runs_exactly_while_the_assistant_holds_or_shares_the_floor(
    events: list[pb.ConverseResponse],
) -> None:
    # This is why the table needs no response_done row for IDLE or USER_SPEAKING.
    s = open_session().session
    for event in events:
        s.publish(event, now=0.0)
        running = bool(s.responses.active_response_id)
        assert running is (s.responses.turn in (ASSISTANT, OVERLAP))
