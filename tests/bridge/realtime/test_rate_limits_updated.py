"""``rate_limits.updated`` after every response, as OpenAI sends it, with the service's own
numbers: the official ``openai`` SDK through a real bridge and a keyed service.

The service runs on a :class:`~tests.serving.FakeClock` that never moves, so no bucket refills
and every number is known: each command a client sends takes one from its session's bucket and
one from its key's, and the update names the tighter of the two.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import orjson
from openai import AsyncOpenAI
from openai.types.realtime import RateLimitsUpdatedEvent

from omni_grpc.core import Limits
from tests.bridge.testkit import check_plain_event, running_bridge, service_settings
from tests.serving import FakeClock, serving

KEY = "tenant-key"
# A session may send 20 commands in a burst, its key 10 across all its sessions; input bytes
# are the session's to spend (the key's bucket is larger).
LIMITS = Limits(
    disconnect_grace_s=5.0,
    session_commands_per_s=20.0,
    key_commands_per_s=10.0,
    session_audio_bytes_per_s=1_000_000.0,
    key_audio_bytes_per_s=2_000_000.0,
    rate_burst_s=1.0,
)
CHUNK = b"\x00\x08" * 2400  # 100 ms of 24 kHz pcm16


async def one_turn(port: int) -> list[dict[str, Any]]:
    """A stock SDK session: one append, a commit, a response; its events up to the update that
    follows the response, each checked against OpenAI's types and parsed by the SDK."""
    client = AsyncOpenAI(api_key=KEY, websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    events: list[dict[str, Any]] = []
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await conn.input_audio_buffer.append(audio=base64.b64encode(CHUNK).decode())
        await conn.input_audio_buffer.commit()
        await conn.response.create()
        while not events or events[-1]["type"] != "rate_limits.updated":
            raw = await asyncio.wait_for(conn.recv_bytes(), 10)
            event = orjson.loads(raw)
            check_plain_event(event)
            if event["type"] == "rate_limits.updated":
                assert isinstance(conn.parse_event(raw), RateLimitsUpdatedEvent)
            events.append(event)
    return events


async def test_every_response_is_followed_by_the_keys_true_limits() -> None:
    async with (
        serving(service_settings(limits=LIMITS, api_keys=(KEY,)), clock=FakeClock()) as service,
        running_bridge(service.target, api_keys=(KEY,)) as port,
    ):
        first = await one_turn(port)
        assert [e["type"] for e in first[-2:]] == ["response.done", "rate_limits.updated"]
        assert "error" not in [e["type"] for e in first]
        requests, tokens = first[-1]["rate_limits"]
        # Three commands taken: the key's bucket (10) holds less than the session's (20).
        assert requests == {"name": "requests", "limit": 10, "remaining": 7, "reset_seconds": 0.3}
        # Input bytes (OpenAI's "tokens" name the service's byte bucket): the session's, which
        # paid the audio and each command's bytes on the wire.
        assert tokens["name"] == "tokens" and tokens["limit"] == 1_000_000
        assert tokens["remaining"] < 1_000_000 - len(CHUNK)
        # Full again when the bytes spent have come back, to the millisecond (rounded up).
        spent_s = (1_000_000 - tokens["remaining"]) / 1_000_000
        assert 0 <= tokens["reset_seconds"] - spent_s <= 0.001

        # Another session of the same key shares its bucket: three more commands.
        second = await one_turn(port)
        requests, _ = second[-1]["rate_limits"]
        assert (requests["limit"], requests["remaining"]) == (10, 4)
