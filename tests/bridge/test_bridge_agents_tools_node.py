"""``@openai/agents-realtime`` on Node with a function tool and a handoff, against the real
bridge and a loopback service that calls the first tool it is offered (``tool_call=auto``).

The Node script (``node/agents_tools_client.mjs``) speaks one turn, which the service answers
with the handoff, and types a second, which it answers with ``get_weather``; the SDK runs the
tool, sends its output, and the answer that says it is spoken. Every server event is checked
strictly here too, and neither the SDK nor the session reports an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from bridge_testkit import check_plain_event, running_bridge, service_settings
from test_bridge_agents import agents_client  # noqa: F401 (the fixture: npm ci once)

from tests.serving import FAST, serving

WEATHER_REPORT = "sunny, 21 degrees"


@pytest.fixture
async def tool_port() -> AsyncIterator[int]:
    async with (
        serving(service_settings(engine_options={**FAST, "tool_call": "auto"})) as running,
        running_bridge(running.target) as port,
    ):
        yield port


async def test_agents_realtime_tool_and_handoff_conversation(
    agents_client: Path,  # noqa: F811
    tool_port: int,
    speech: bytes,
    tmp_path: Path,
) -> None:
    pcm = tmp_path / "speech24.pcm"
    pcm.write_bytes(speech)
    process = await asyncio.create_subprocess_exec(
        "node",
        str(agents_client.parent / "agents_tools_client.mjs"),
        f"ws://127.0.0.1:{tool_port}/v1/realtime?model=gpt-realtime",
        str(pcm),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    lines: list[dict[str, Any]] = [orjson.loads(line) for line in out.splitlines()]
    events = [line["transport"] for line in lines if "transport" in line]
    seen = [line for line in lines if "session" in line]
    for event in events:
        if event["type"] != "audio":  # the SDK's own decoded-audio notice, not a frame
            check_plain_event(event)
    assert [s for s in seen if s["session"] == "error"] == []
    assert not any(e["type"] == "error" for e in events)
    assert {"session": "handoff", "from": "triage", "to": "weather_agent"} in seen
    assert {"session": "tool_ran", "city": "x"} in seen  # the loopback's schema-built argument
    ended = {"session": "tool_end", "agent": "weather_agent", "tool": "get_weather"}
    ends = [s for s in seen if s["session"] == "tool_end" and s["tool"] == "get_weather"]
    assert [{k: s[k] for k in ended} for s in ends] == [ended]
    assert ends[0]["result"] == WEATHER_REPORT
    after = seen[seen.index(ends[0]) :]
    assert any(s["session"] == "audio" for s in after)  # the answer is spoken
    transcripts = [
        e["transcript"] for e in events if e["type"] == "response.output_audio_transcript.done"
    ]
    assert transcripts[-1] == f'the function returned "{WEATHER_REPORT}"'
    updates = [e["session"] for e in events if e["type"] == "session.updated"]
    assert any([t["name"] for t in u["tools"]] == ["get_weather"] for u in updates)
    assert err.decode().strip() == ""
