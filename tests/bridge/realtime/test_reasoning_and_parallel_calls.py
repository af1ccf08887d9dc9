"""``parallel_tool_calls`` honoured and ``reasoning`` refused, through a real bridge and a
loopback service that calls tools: the official ``openai`` SDK sends both as a user of it
would, and every frame is checked against OpenAI's types.

Every engine honours ``parallel_tool_calls``: ``false`` holds a response to one call (the vllm
engine keeps the first its model wrote; the others never make more), and the capabilities say
which engines may make several. No engine reasons, so a ``reasoning`` effort is refused in band,
naming the field, and the session goes on as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection

from tests.bridge.testkit import (
    WITH_EXTENSIONS,
    check_plain_event,
    realtime_socket,
    running_bridge,
    service_settings,
)
from tests.serving import FAST, serving

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
USER_TEXT = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "?"}]}


@pytest.fixture
async def tool_port() -> AsyncIterator[int]:
    """A bridge in front of a loopback service that calls a tool under an auto choice."""
    options = {**FAST, "tool_call": "auto"}
    async with (
        serving(service_settings(engine_options=options)) as running,
        running_bridge(running.target) as port,
    ):
        yield port


async def until(conn: AsyncRealtimeConnection, kind: str) -> list[dict[str, Any]]:
    """The connection's events up to the first of ``kind``, each checked as a plain client's."""
    events: list[dict[str, Any]] = []
    while not events or events[-1]["type"] != kind:
        event = orjson.loads(await asyncio.wait_for(conn.recv_bytes(), 10))
        check_plain_event(event)
        events.append(event)
    return events


async def test_the_sdk_sets_parallel_tool_calls_and_is_refused_reasoning(tool_port: int) -> None:
    client = AsyncOpenAI(api_key="k", websocket_base_url=f"ws://127.0.0.1:{tool_port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await until(conn, "session.created")
        await conn.session.update(
            session={"type": "realtime", "tools": [WEATHER], "parallel_tool_calls": False}
        )
        assert (await until(conn, "session.updated"))[-1]["session"]["tools"] == [WEATHER]

        # A reasoning effort: refused whole, naming the field, and nothing of it applied.
        await conn.session.update(
            session={
                "type": "realtime",
                "instructions": "Think first.",
                "reasoning": {"effort": "low"},
            },
            event_id="ask_reasoning",
        )
        (refused,) = (await until(conn, "error"))[-1:]
        error = refused["error"]
        assert (error["code"], error["param"], error["event_id"]) == (
            "unsupported_field",
            "session.reasoning",
            "ask_reasoning",
        )
        await conn.conversation.item.create(item=USER_TEXT)
        await conn.response.create(response={"reasoning": {"effort": "high"}})
        error = (await until(conn, "error"))[-1]["error"]
        assert (error["code"], error["param"]) == ("unsupported_field", "response.reasoning")

        # The session goes on: the response it asks for instead makes one call, and asking for
        # no effort at all is what a client without reasoning sends.
        await conn.session.update(session={"type": "realtime", "reasoning": {"effort": None}})
        updated = (await until(conn, "session.updated"))[-1]["session"]
        assert "instructions" not in updated  # the refused update's instructions never applied
        await conn.response.create(response={"parallel_tool_calls": False})
        events = await until(conn, "response.done")
        assert "error" not in [e["type"] for e in events]
        output = events[-1]["response"]["output"]
        assert [item["type"] for item in output] == ["message", "function_call"]


async def test_an_extension_client_sees_the_setting_and_what_the_engine_may_do(
    tool_port: int,
) -> None:
    async with realtime_socket(tool_port, WITH_EXTENSIONS) as socket:
        created = (await socket.until("session.created"))[-1]
        # The loopback makes one call a response at most, whatever the setting.
        assert created["capabilities"]["supports_parallel_tool_calls"] is False
        assert created["session"]["parallel_tool_calls"] is True  # OpenAI's default
        await socket.send({"type": "session.update", "session": {"parallel_tool_calls": False}})
        updated = (await socket.until("session.updated"))[-1]["session"]
        assert updated["parallel_tool_calls"] is False
        # An update that does not name it keeps it.
        await socket.send({"type": "session.update", "session": {"instructions": "Be brief."}})
        updated = (await socket.until("session.updated"))[-1]["session"]
        assert updated["parallel_tool_calls"] is False
