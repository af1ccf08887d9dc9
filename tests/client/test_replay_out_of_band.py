"""A replay's turns leave out-of-band responses out: they answer the client's question beside
the conversation, not a turn of it, whether read from the contract's events (a recording, a gRPC
replay) or from the OpenAI dialect's (a websocket replay, where ``conversation_id`` is null)."""

from __future__ import annotations

from omni_grpc.client.replay.turns import Step, turns
from omni_grpc.client.replay.ws_driver import event_step


def test_an_out_of_band_response_is_no_turn() -> None:
    side = {"id": "side", "conversation": "RESPONSE_CONVERSATION_NONE"}
    steps = [
        Step(0.0, "command", "append_input_text", {"text": "hello"}),
        Step(0.1, "event", "response_created", {"response": side}),
        Step(0.2, "event", "output_text_delta", {"response_id": "side", "delta": "yes"}),
        Step(0.3, "event", "response_created", {"response": {"id": "spoken"}}),
        Step(0.4, "event", "output_text_delta", {"response_id": "spoken", "delta": "hi"}),
        Step(0.5, "event", "response_done", {"response": {"id": "side"}}),
    ]
    [turn] = turns(steps)
    assert (turn.response_id, turn.said, turn.answer) == ("spoken", "hello", "hi")


def test_the_dialects_null_conversation_id_marks_it() -> None:
    side = event_step(
        {"type": "response.created", "response": {"id": "r", "conversation_id": None}}, 0.0
    )
    spoken = event_step({"type": "response.created", "response": {"id": "s"}}, 0.0)
    assert side.body["response"]["conversation"] == "RESPONSE_CONVERSATION_NONE"
    assert "conversation" not in spoken.body["response"]
