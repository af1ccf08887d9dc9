"""Every group of kinds the core names is made of kinds of the contract, from the right set.

A misspelt kind would match nothing and silently switch a rule off, so each is held against
``omni_grpc.wire.kinds`` (which ``tests/test_wire.py`` holds against the contract itself).
"""

from __future__ import annotations

from omni_grpc.core.admission import HANDSHAKE_REFUSALS, INPUT_ENDING_COMMANDS, INPUT_TAKEN_EVENTS
from omni_grpc.core.responses import TURN_EVENTS
from omni_grpc.wire.kinds import CONVERSATION_EVENTS, ENGINE_COMMANDS, HANDSHAKE_COMMANDS


def test_every_handshake_command_has_its_refusal() -> None:
    assert set(HANDSHAKE_REFUSALS) == HANDSHAKE_COMMANDS


def test_the_commands_that_end_pending_input_go_to_the_engine() -> None:
    assert INPUT_ENDING_COMMANDS <= ENGINE_COMMANDS
    assert "append_input_audio" in ENGINE_COMMANDS


def test_the_events_the_core_follows_are_numbered_conversation_events() -> None:
    assert INPUT_TAKEN_EVENTS <= CONVERSATION_EVENTS
    assert TURN_EVENTS <= CONVERSATION_EVENTS
    assert {"response_created", "response_done"} <= CONVERSATION_EVENTS
