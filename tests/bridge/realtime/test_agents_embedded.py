"""``openai-agents`` (Python) with a function tool and a handoff against the real bridge in front
of the embedded engine: its scripted responder (echo), and SmolLM2 writing the calls under
llguidance's grammar.

Turn 1 is spoken (Whisper hears it), turn 2 typed. With the scripted responder the session's
``auto`` choice makes each turn call the first tool it is offered (the handoff, then
``get_weather``). With SmolLM2 each turn's ``response.create`` asks for ``tool_choice:
required``, so the model itself writes the call, constrained to a callable tool's schema: the
handoff, then ``get_weather`` with the city it read. In both the SDK runs the tool, returns its
output, and the engine's answer to it is spoken; no error session event, no error logged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import jsonschema
import pytest
from agents.realtime import RealtimeAgent, RealtimeRunner
from agents.realtime.config import RealtimeSessionModelSettings
from agents.realtime.model_inputs import RealtimeModelRawClientMessage, RealtimeModelSendRawMessage

from tests.bridge.realtime.test_agents_tools import (
    WEATHER_REPORT,
    Conversation,
    answer_done,
    asked,
    get_weather,
)
from tests.bridge.testkit import running_bridge, service_settings
from tests.serving import serving

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(params=["echo", "smollm2"])
async def embedded_port(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, int]]:
    """A bridge in front of the embedded engine with the responder of the parameter."""
    options = {"responder": request.param, "pace": "fast"}
    async with (
        serving(service_settings(engine="embedded", engine_options=options)) as running,
        running_bridge(running.target) as port,
    ):
        yield request.param, port


def typed(text: str) -> RealtimeModelRawClientMessage:
    content = [{"type": "input_text", "text": text}]
    item = {"type": "message", "role": "user", "content": content}
    # The SDK's raw messages carry the event's fields in other_data.
    return {"type": "conversation.item.create", "other_data": {"item": item}}


async def test_agents_tool_and_handoff_on_the_embedded_engine(
    embedded_port: tuple[str, int], speech: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    responder, port = embedded_port
    asked.clear()
    weather = RealtimeAgent(
        name="weather_agent",
        instructions="Say the weather.",
        handoff_description="Knows the weather.",
        tools=[get_weather],
    )
    triage = RealtimeAgent(name="triage", instructions="Hand off.", handoffs=[weather])
    settings: RealtimeSessionModelSettings = {"model_name": "gpt-realtime", "turn_detection": None}
    runner = RealtimeRunner(triage, config={"model_settings": settings})
    caplog.set_level(logging.WARNING)
    # The model's own call, under the grammar; the scripted responder calls on auto.
    respond: RealtimeModelRawClientMessage = {"type": "response.create"}
    if responder == "smollm2":
        respond["other_data"] = {"response": {"tool_choice": "required"}}
    session = await runner.run(
        model_config={"url": f"ws://127.0.0.1:{port}/v1/realtime", "api_key": "test-key"}
    )
    async with session:
        talk = Conversation(session)
        await talk.until(lambda e: talk.raw("session.updated") != [], wait_s=60)

        await session.send_audio(speech, commit=True)  # turn 1, spoken
        await session.model.send_event(RealtimeModelSendRawMessage(message=respond))
        await talk.until(lambda e: e.type == "handoff", wait_s=120)
        await talk.until(answer_done, wait_s=120)

        await session.model.send_event(  # turn 2, typed
            RealtimeModelSendRawMessage(message=typed("What is the weather in Paris?"))
        )
        await session.model.send_event(RealtimeModelSendRawMessage(message=respond))
        await talk.until(lambda e: e.type == "tool_end", wait_s=120)
        await talk.until(answer_done, wait_s=120)

    (handoff,) = talk.of("handoff")
    assert (handoff.from_agent.name, handoff.to_agent.name) == ("triage", "weather_agent")
    (call,) = [
        e for e in talk.raw("response.function_call_arguments.done") if e["name"] == "get_weather"
    ]
    jsonschema.validate(json.loads(call["arguments"]), get_weather.params_json_schema)
    assert asked == (["x"] if responder == "echo" else ["Paris"])
    (tool_end,) = [e for e in talk.of("tool_end") if e.tool.name == "get_weather"]
    assert tool_end.output == WEATHER_REPORT
    after_tool = talk.events[talk.events.index(tool_end) :]
    assert any(event.type == "audio" for event in after_tool)  # the answer is spoken
    transcripts = [e["transcript"] for e in talk.raw("response.output_audio_transcript.done")]
    assert transcripts[-1].strip()
    if responder == "echo":  # the echo says the output back
        assert WEATHER_REPORT in transcripts[-1]
    assert talk.of("error") == [], [e.error for e in talk.of("error")]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
