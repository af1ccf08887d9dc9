"""``@openai/agents-realtime`` on Node with a function tool and a handoff, against the real
bridge and a loopback service that calls the first tool it is offered (``tool_call=auto``), or
the embedded engine: its scripted responder, or SmolLM2 writing each call under llguidance's
grammar (the client's turns ask ``tool_choice: required``).

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

from tests.bridge.realtime.test_agents import agents_client  # noqa: F401 (the fixture: npm ci once)
from tests.bridge.testkit import check_plain_event, running_bridge, service_settings
from tests.serving import FAST, serving

WEATHER_REPORT = "sunny, 21 degrees"


# (engine, its options, the tool_choice of the client's turns, the city get_weather gets)
SERVICES = {
    "loopback": ("loopback", {**FAST, "tool_call": "auto"}, "auto", "x"),
    "embedded-scripted": ("embedded", {"responder": "echo", "pace": "fast"}, "auto", "x"),
    "embedded-smollm2": ("embedded", {"responder": "smollm2", "pace": "fast"}, "required", "Paris"),
}


@pytest.fixture(
    params=[
        "loopback",
        pytest.param("embedded-scripted", marks=pytest.mark.slow),
        pytest.param("embedded-smollm2", marks=pytest.mark.slow),
    ]
)
async def tool_service(request: pytest.FixtureRequest) -> AsyncIterator[tuple[int, str, str]]:
    """A bridge in front of a service that calls tools; the port, the turns' tool_choice and
    the city the call names."""
    engine, options, choice, city = SERVICES[request.param]
    async with (
        serving(service_settings(engine=engine, engine_options=options)) as running,
        running_bridge(running.target) as port,
    ):
        yield port, choice, city


@pytest.mark.timeout(300)
async def test_agents_realtime_tool_and_handoff_conversation(
    agents_client: Path,  # noqa: F811
    tool_service: tuple[int, str, str],
    speech: bytes,
    tmp_path: Path,
) -> None:
    tool_port, choice, city = tool_service
    pcm = tmp_path / "speech24.pcm"
    pcm.write_bytes(speech)
    process = await asyncio.create_subprocess_exec(
        "node",
        str(agents_client.parent / "agents_tools_client.mjs"),
        f"ws://127.0.0.1:{tool_port}/v1/realtime?model=gpt-realtime",
        str(pcm),
        choice,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 170)
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
    assert {"session": "tool_ran", "city": city} in seen  # schema-built, or the model's
    ended = {"session": "tool_end", "agent": "weather_agent", "tool": "get_weather"}
    ends = [s for s in seen if s["session"] == "tool_end" and s["tool"] == "get_weather"]
    assert [{k: s[k] for k in ended} for s in ends] == [ended]
    assert ends[0]["result"] == WEATHER_REPORT
    after = seen[seen.index(ends[0]) :]
    assert any(s["session"] == "audio" for s in after)  # the answer is spoken
    transcripts = [
        e["transcript"] for e in events if e["type"] == "response.output_audio_transcript.done"
    ]
    assert transcripts[-1].strip()
    if choice == "auto":  # the scripted responders say the output back
        assert WEATHER_REPORT in transcripts[-1]
    updates = [e["session"] for e in events if e["type"] == "session.updated"]
    assert any([t["name"] for t in u["tools"]] == ["get_weather"] for u in updates)
    assert err.decode().strip() == ""
