"""OpenAI's Python agents framework (``openai-agents``) with a function tool and a handoff,
against the real bridge and service.

A ``RealtimeAgent`` that can only hand off to a weather agent, whose one tool is a Python
function, talks to a loopback service that calls the first tool it is offered
(``tool_call=auto``) and then says what the function returned. The first turn is spoken
(audio, committed, then ``response.create``): the service calls the handoff, the SDK switches
agents (its own ``session.update``) and sends the handoff's output back, and the service's
answer to it is spoken. The second turn is typed: the service calls ``get_weather``, the SDK
runs the Python function, returns its output, and the answer that says it is spoken. The SDK
validates every server event against OpenAI's strict GA union, so an event it does not know is
an ``error`` session event: the test asserts there is none, and no error in the SDK's log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner, RealtimeSession
from agents.realtime.model_inputs import RealtimeModelSendRawMessage

from tests.bridge.testkit import running_bridge, service_settings
from tests.serving import FAST, serving

WEATHER_REPORT = "sunny, 21 degrees"
asked: list[str] = []  # the cities get_weather was run for


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    asked.append(city)
    return WEATHER_REPORT


@pytest.fixture
async def tool_port() -> AsyncIterator[int]:
    """A bridge in front of a loopback service that calls the first tool it is offered."""
    async with (
        serving(service_settings(engine_options={**FAST, "tool_call": "auto"})) as running,
        running_bridge(running.target) as port,
    ):
        yield port


class Conversation:
    """The session events an agents application sees, collected as they come."""

    def __init__(self, session: RealtimeSession) -> None:
        self.session = session
        self.events: list[Any] = []

    async def until(self, done: Any, wait_s: float = 20.0) -> None:
        """Reads session events until ``done(event)`` holds."""
        async with asyncio.timeout(wait_s):
            async for event in self.session:
                self.events.append(event)
                if done(event):
                    return

    def of(self, kind: str) -> list[Any]:
        return [event for event in self.events if event.type == kind]

    def raw(self, kind: str) -> list[dict[str, Any]]:
        """The bridge's frames of ``kind``, as the SDK received them."""
        frames = [
            e.data.data for e in self.of("raw_model_event") if e.data.type == "raw_server_event"
        ]
        return [frame for frame in frames if frame.get("type") == kind]


def answer_done(event: Any) -> bool:
    """The end of a response that calls nothing: the answer to a tool's output. (The SDK's
    own turn-ended events cannot tell it from the end of the call's response, which may come
    before or after the SDK ran the tool.)"""
    if event.type != "raw_model_event" or event.data.type != "raw_server_event":
        return False
    frame = event.data.data
    output = frame.get("response", {}).get("output", [])
    return frame["type"] == "response.done" and all(i["type"] != "function_call" for i in output)


async def test_agents_tool_and_handoff_conversation(
    tool_port: int, speech: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    asked.clear()
    weather = RealtimeAgent(
        name="weather_agent",
        instructions="Say the weather.",
        handoff_description="Knows the weather.",
        tools=[get_weather],
    )
    triage = RealtimeAgent(name="triage", instructions="Hand off.", handoffs=[weather])
    runner = RealtimeRunner(
        triage,
        config={
            "model_settings": {
                "model_name": "gpt-realtime",
                "turn_detection": None,  # the loopback has no VAD: turns are committed
                "modalities": ["audio"],
            }
        },
    )
    caplog.set_level(logging.WARNING)
    session = await runner.run(
        model_config={"url": f"ws://127.0.0.1:{tool_port}/v1/realtime", "api_key": "test-key"}
    )
    async with session:
        talk = Conversation(session)
        await talk.until(lambda e: e.type == "history_updated" or e.type == "agent_start")

        # Turn 1, spoken: the handoff is called, run by the SDK, and its output answered.
        await session.send_audio(speech, commit=True)
        await session.model.send_event(
            RealtimeModelSendRawMessage(message={"type": "response.create"})
        )
        await talk.until(lambda e: e.type == "handoff")
        await talk.until(answer_done)
        (handoff,) = talk.of("handoff")
        assert (handoff.from_agent.name, handoff.to_agent.name) == ("triage", "weather_agent")

        # Turn 2, typed: the weather tool is called, runs here, and its output is spoken.
        await session.send_message("What is the weather in Paris?")
        await talk.until(lambda e: e.type == "tool_end")
        await talk.until(answer_done)

    assert asked == ["x"]  # the loopback's arguments, built from the tool's schema
    (tool_start,) = [e for e in talk.of("tool_start") if e.tool.name == "get_weather"]
    (tool_end,) = [e for e in talk.of("tool_end") if e.tool.name == "get_weather"]
    assert tool_end.output == WEATHER_REPORT and tool_start.agent.name == "weather_agent"
    # Each answer after a call is spoken: audio, and a transcript saying what came back.
    transcripts = [e["transcript"] for e in talk.raw("response.output_audio_transcript.done")]
    assert transcripts[-1] == f'the function returned "{WEATHER_REPORT}"'
    assert any("weather_agent" in said for said in transcripts)  # the handoff's output
    after_tool = talk.events[talk.events.index(tool_end) :]
    assert any(event.type == "audio" for event in after_tool)
    # The SDK switched agents: its session.update gave the service the weather tool.
    tools = [[t["name"] for t in u["session"]["tools"]] for u in talk.raw("session.updated")]
    assert ["get_weather"] in tools
    assert talk.of("error") == [], [e.error for e in talk.of("error")]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
