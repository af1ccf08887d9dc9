"""Responses: which response is running, which are over, and who holds the floor.

The rule held here:

* **No stale output.** Once a response is done, later output for it is dropped here, whatever
  the engine still had in flight: its output events (``RESPONSE_OUTPUT_EVENTS`` in
  ``omni_grpc.wire.kinds``), a second ``response_done``, or a ``response_created`` that would
  start it again. The newest ``FINISHED_RESPONSES_KEPT`` endings are remembered.

The turn state follows the engine's events through a table, ``(TurnState, event kind) ->
TurnState``, as the lifecycle does in ``state.py``. The core tells four states apart where the
wire has three, because "the user speaks" means something else while a response is still
running: that is an *overlap*, which ends either with the response (a barge-in: the user still
has the floor) or with the user (heard while the assistant went on: the floor goes back to the
response). ``response_done`` in the table means that the running response ended; the end of any
other response moves nothing. A running response exists exactly in ASSISTANT_RESPONDING and
OVERLAP, so the table has no ``response_done`` row for IDLE or USER_SPEAKING.

The moves, every other pair of the table leaving the turn where it is::

    IDLE ── speech_started ──► USER_SPEAKING ── speech_stopped / input_* ──► IDLE
    IDLE, USER_SPEAKING, OVERLAP ── response_created ──► ASSISTANT_RESPONDING
    ASSISTANT_RESPONDING ── speech_started ──► OVERLAP ── speech_stopped / input_* ──► back
    ASSISTANT_RESPONDING ── response_done ──► IDLE
    OVERLAP ── response_done ──► USER_SPEAKING          (a barge-in ended the response)

(``input_*``: ``input_committed`` or ``input_cleared``; ``back``: to ASSISTANT_RESPONDING.)

An out-of-band response (``Response.conversation`` NONE) moves nothing: it is never the
running response. It answers a question of the client's beside the conversation (a
classification, a summary), so the user speaking over the assistant is no reason to end it, and
its start or end says nothing about who holds the floor. It is not counted in ``epoch`` either
(which counts interruptions); the no-stale-output rule holds for it as for any response.
"""

from __future__ import annotations

import collections
import enum

from omni_grpc.core.state import IllegalTransition
from omni_grpc.wire import pb
from omni_grpc.wire.kinds import RESPONSE_OUTPUT_EVENTS

FINISHED_RESPONSES_KEPT = 256


class TurnState(enum.Enum):
    """Who holds the floor, as the core tracks it."""

    IDLE = "idle"
    USER_SPEAKING = "user_speaking"
    ASSISTANT_RESPONDING = "assistant_responding"
    OVERLAP = "overlap"  # the user speaks while a response is still running

    @property
    def wire(self) -> pb.TurnState.ValueType:
        """The state as the client sees it."""
        return _WIRE[self]


_WIRE: dict[TurnState, pb.TurnState.ValueType] = {
    TurnState.IDLE: pb.TURN_STATE_IDLE,
    TurnState.USER_SPEAKING: pb.TURN_STATE_USER_SPEAKING,
    TurnState.ASSISTANT_RESPONDING: pb.TURN_STATE_ASSISTANT_RESPONDING,
    TurnState.OVERLAP: pb.TURN_STATE_USER_SPEAKING,  # the user is speaking, after all
}

_IDLE, _USER, _ASSISTANT, _OVERLAP = (
    TurnState.IDLE,
    TurnState.USER_SPEAKING,
    TurnState.ASSISTANT_RESPONDING,
    TurnState.OVERLAP,
)
TURN_TRANSITIONS: dict[tuple[TurnState, str], TurnState] = {
    (_IDLE, "speech_started"): _USER,
    (_IDLE, "speech_stopped"): _IDLE,
    (_IDLE, "input_committed"): _IDLE,
    (_IDLE, "input_cleared"): _IDLE,
    (_IDLE, "response_created"): _ASSISTANT,
    (_USER, "speech_started"): _USER,
    (_USER, "speech_stopped"): _IDLE,
    (_USER, "input_committed"): _IDLE,
    (_USER, "input_cleared"): _IDLE,
    (_USER, "response_created"): _ASSISTANT,
    (_ASSISTANT, "speech_started"): _OVERLAP,
    (_ASSISTANT, "speech_stopped"): _ASSISTANT,
    (_ASSISTANT, "input_committed"): _ASSISTANT,
    (_ASSISTANT, "input_cleared"): _ASSISTANT,
    (_ASSISTANT, "response_created"): _ASSISTANT,  # a new response replaces the running one
    (_ASSISTANT, "response_done"): _IDLE,
    (_OVERLAP, "speech_started"): _OVERLAP,
    (_OVERLAP, "speech_stopped"): _ASSISTANT,
    (_OVERLAP, "input_committed"): _ASSISTANT,
    (_OVERLAP, "input_cleared"): _ASSISTANT,
    (_OVERLAP, "response_created"): _ASSISTANT,
    (_OVERLAP, "response_done"): _USER,
}
# The event kinds that can move the turn.
TURN_EVENTS = frozenset(kind for _, kind in TURN_TRANSITIONS)


def next_turn(turn: TurnState, kind: str) -> TurnState:
    """Looks the move up in the table."""
    try:
        return TURN_TRANSITIONS[(turn, kind)]
    except KeyError:
        raise IllegalTransition(f"{kind} is not allowed in {turn.name}") from None


class Responses:
    """The responses of one session, and the turn state they imply."""

    __slots__ = ("_finished", "active_response_id", "dropped_stale_events", "epoch", "turn")

    def __init__(self) -> None:
        self.turn = TurnState.IDLE
        self.active_response_id = ""
        # Counts cancelled responses (interruptions); the client reads it in the session view.
        self.epoch = 0
        self.dropped_stale_events = 0
        self._finished: collections.OrderedDict[str, None] = collections.OrderedDict()

    def accept(self, kind: str | None, event: pb.ConverseResponse) -> bool:
        """Tracks one event from the engine; False (and counted) if it is stale output."""
        if kind == "output_audio_delta":  # the usual event: its response looked up inline
            if event.output_audio_delta.response_id in self._finished:
                self.dropped_stale_events += 1
                return False
            return True
        response_id = _response_id(kind, event)
        if response_id is not None and response_id in self._finished:
            self.dropped_stale_events += 1
            return False
        if kind == "response_created":
            response = event.response_created.response
            if response.conversation == pb.RESPONSE_CONVERSATION_NONE:
                return True  # out of band: not the running response, the turn stays
            self.active_response_id = response.id
        if kind == "response_done":
            self._finish(event.response_done.response)
        elif kind in TURN_EVENTS:
            self.turn = next_turn(self.turn, kind)
        return True

    def _finish(self, response: pb.Response) -> None:
        self._finished[response.id] = None
        if len(self._finished) > FINISHED_RESPONSES_KEPT:
            self._finished.popitem(last=False)
        out_of_band = response.conversation == pb.RESPONSE_CONVERSATION_NONE
        if response.status == pb.RESPONSE_STATUS_CANCELLED and not out_of_band:
            self.epoch += 1
        if response.id and response.id == self.active_response_id:
            self.active_response_id = ""
            self.turn = next_turn(self.turn, "response_done")


def _response_id(kind: str | None, event: pb.ConverseResponse) -> str | None:
    """The response an event belongs to, or None for an event of no response."""
    if kind in RESPONSE_OUTPUT_EVENTS:
        response_id: str = getattr(event, kind).response_id
        return response_id
    if kind == "response_done":
        return event.response_done.response.id
    if kind == "response_created":
        return event.response_created.response.id
    return None
