"""OpenAI's voice-agent framework, ``@openai/agents-realtime`` on Node, against the bridge.

A second independent client in a second language: it sends its own ``session.update`` (GA
shape, Bearer auth, plain ``ws://``), one spoken turn and ``response.create``, and prints every
event it receives; each must validate against OpenAI's schema or our extension schema.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.bridge.testkit import check_plain_event
from tests.node_packages import installed

NODE_DIR = Path(__file__).parents[1] / "node"  # tests/bridge/node


@pytest.fixture(scope="session")
def agents_client() -> Path:
    """The Node client script, with its locked packages installed whole (tests.node_packages)."""
    return installed(NODE_DIR) / "agents_client.mjs"


async def test_agents_realtime_session_turn_and_response(
    agents_client: Path, bridge_port: int, speech: bytes, tmp_path: Path
) -> None:
    pcm = tmp_path / "speech24.pcm"
    pcm.write_bytes(speech)
    process = await asyncio.create_subprocess_exec(
        "node",
        str(agents_client),
        f"ws://127.0.0.1:{bridge_port}/v1/realtime?model=gpt-realtime",
        str(pcm),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    events: list[dict[str, Any]] = [orjson.loads(line) for line in out.splitlines()]
    for event in events:
        check_plain_event(event)
    types = [e["type"] for e in events]
    assert "error" not in types, [e for e in events if e["type"] == "error"]
    assert types[0] == "session.created" and "session.updated" in types
    # The agent's own session.update went through: its instructions and no turn detection.
    # It sends two: its configuration once the socket is open, and tracing alone once it reads
    # session.created. Under load it can read session.created first, so either may come
    # first; the answer to the later one holds both.
    answers = [e["session"] for e in events if e["type"] == "session.updated"]
    assert len(answers) == 2
    updated = answers[-1]
    assert updated["instructions"] == "Answer briefly."
    assert updated["audio"]["input"]["turn_detection"] is None
    start = types.index("response.created")
    assert types[start : start + 4] == [
        "response.created",
        "conversation.item.added",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-1] == "response.done"
    assert events[-1]["response"]["status"] == "completed"
    reply = b"".join(
        base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta"
    )
    assert abs(len(reply) - len(speech)) <= 48 * 30  # the loopback says it back, ±30 ms
