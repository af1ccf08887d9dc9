"""Function tools through the real bridge and a loopback service that calls them (``tool_call``
``auto``): GA tool fields in, the call as a response's output item out, its output back in, and
the answer; every frame checked strictly against OpenAI's GA models (a plain client)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.bridge.testkit import RealtimeSocket, realtime_socket, running_bridge, service_settings
from tests.serving import FAST, serving

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"],
    },
}


@pytest.fixture
async def tool_port() -> AsyncIterator[int]:
    """A bridge in front of a loopback service that calls a tool under an auto choice."""
    options = {**FAST, "tool_call": "auto"}
    async with (
        serving(service_settings(engine_options=options)) as running,
        running_bridge(running.target) as port,
    ):
        yield port


async def opened(socket: RealtimeSocket, **session: Any) -> dict[str, Any]:
    await socket.until("session.created")
    await socket.send({"type": "session.update", "session": {"type": "realtime", **session}})
    return (await socket.until("session.updated"))[-1]["session"]


async def say(socket: RealtimeSocket, text: str) -> list[dict[str, Any]]:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await socket.send({"type": "conversation.item.create", "item": item})
    await socket.until("conversation.item.done")
    await socket.send({"type": "response.create"})
    return await socket.until("response.done")


async def test_a_tool_call_its_output_and_the_spoken_answer(tool_port: int) -> None:
    async with realtime_socket(tool_port) as socket:
        session = await opened(socket, tools=[WEATHER], tool_choice="auto")
        assert session["tools"] == [WEATHER] and session["tool_choice"] == "auto"

        events = await say(socket, "What is the weather in Paris?")
        calls = [e for e in events if e.get("item", {}).get("type") == "function_call"]
        assert [e["type"] for e in calls] == [
            "response.output_item.added",
            "conversation.item.added",
            "response.output_item.done",
            "conversation.item.done",
        ]
        deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
        (done,) = [e for e in events if e["type"] == "response.function_call_arguments.done"]
        assert "".join(e["delta"] for e in deltas) == done["arguments"]
        assert json.loads(done["arguments"]) == {"city": "x", "unit": "c"}
        assert done["name"] == "get_weather" and done["output_index"] == 1
        call = calls[-1]["item"]
        assert (call["call_id"], call["arguments"], call["status"]) == (
            done["call_id"],
            done["arguments"],
            "completed",
        )
        output = events[-1]["response"]["output"]
        assert [item["type"] for item in output] == ["message", "function_call"]
        assert output[1] == call

        result = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
        await socket.send({"type": "conversation.item.create", "item": result})
        added = (await socket.until("conversation.item.added"))[-1]["item"]
        assert (added["type"], added["call_id"], added["output"]) == (
            "function_call_output",
            call["call_id"],
            "sunny",
        )
        await socket.send({"type": "response.create"})
        answer = await socket.until("response.done")
        (spoken,) = [e for e in answer if e["type"] == "response.output_audio_transcript.done"]
        assert spoken["transcript"] == 'the function returned "sunny"'
        assert any(e["type"] == "response.output_audio.delta" for e in answer)
        assert [item["type"] for item in answer[-1]["response"]["output"]] == ["message"]


async def test_a_response_may_force_its_own_tool(tool_port: int) -> None:
    clock = {"type": "function", "name": "now", "description": "The time."}
    async with realtime_socket(tool_port) as socket:
        await opened(socket, tools=[WEATHER], tool_choice="none")
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "t"}]}
        await socket.send({"type": "conversation.item.create", "item": item})
        await socket.send(
            {
                "type": "response.create",
                "response": {"tools": [clock], "tool_choice": {"type": "function", "name": "now"}},
            }
        )
        events = await socket.until("response.done")
        (done,) = [e for e in events if e["type"] == "response.function_call_arguments.done"]
        assert (done["name"], done["arguments"]) == ("now", "{}")


@pytest.mark.parametrize(
    ("event", "param"),
    [
        (
            {"type": "session.update", "session": {"tools": [{"type": "mcp", "name": "m"}]}},
            "session.tools.0.type",
        ),
        (
            {"type": "session.update", "session": {"tool_choice": {"type": "mcp", "name": "m"}}},
            "session.tool_choice.type",
        ),
        (
            {"type": "session.update", "session": {"tools": [{**WEATHER, "name": "a b"}]}},
            "tools.0.name",
        ),
        (
            {
                "type": "session.update",
                "session": {"tool_choice": {"type": "function", "name": "x"}},
            },
            "tool_choice.name",
        ),
        (
            {"type": "conversation.item.create", "item": {"type": "function_call_output"}},
            "item.call_id",
        ),
    ],
    ids=["mcp-tool", "mcp-choice", "bad-name", "unknown-choice", "output-without-call-id"],
)
async def test_tools_the_service_cannot_honour_are_errors_naming_them(
    tool_port: int, event: dict[str, Any], param: str
) -> None:
    async with realtime_socket(tool_port) as socket:
        await opened(socket, tools=[WEATHER])
        await socket.send(event)
        error = (await socket.until("error"))[-1]["error"]
        assert (error["code"], error["param"]) == ("bad_event", param)
