"""vLLM-Omni's endpoint (``/v1/duplex``) through the real bridge and service: the vLLM-Omni
dialect as its clients meet it (raw websockets here; tests/vllm/omni/test_vllm_omni_client.py
drives vLLM-Omni's own client in the vLLM tier)."""

from __future__ import annotations

import asyncio
import base64
import math
import re
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
import pytest


@asynccontextmanager
async def duplex_socket(port: int, path: str = "/v1/duplex") -> AsyncIterator[Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"http://127.0.0.1:{port}{path}") as ws,
    ):
        yield ws


async def send(ws: Any, event: dict[str, Any]) -> None:
    await ws.send_str(orjson.dumps(event).decode())


async def recv(ws: Any, wait_s: float = 5.0) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.receive(), wait_s)
    assert message.type is aiohttp.WSMsgType.TEXT, (message.type, message.extra)
    event: dict[str, Any] = orjson.loads(message.data)
    return event


async def until(ws: Any, kind: str) -> list[dict[str, Any]]:
    events = []
    async with asyncio.timeout(10):
        while True:
            events.append(await recv(ws))
            if events[-1]["type"] == kind:
                return events


def tone(seconds: float, rate: int = 16000) -> str:
    count = round(rate * seconds)
    samples = (round(8000 * math.sin(2 * math.pi * 220 * n / rate)) for n in range(count))
    return base64.b64encode(struct.pack(f"<{count}h", *samples)).decode()


# What vLLM-Omni's client opens with, by default (its SessionConfig.to_session_payload).
REFERENCE_OPEN = {
    "type": "session.update",
    "event_id": "evt_open",
    "session": {
        "model": "loopback-test",
        "modalities": ["audio", "text"],
        "input_audio_format": "pcm16",
        "output_audio_format": "pcm16",
        "sample_rate_hz": 16000,
        "audio": {"input": {"sample_rate_hz": 16000}, "output": {"sample_rate_hz": 24000}},
        "turn_detection": None,
        "extra_body": {"auto_response": True},
    },
}


async def test_a_reference_client_opens_speaks_and_acks_at_its_own_rates(bridge_port: int) -> None:
    async with duplex_socket(bridge_port) as ws:
        await send(ws, REFERENCE_OPEN)
        created, updated = await recv(ws), await recv(ws)
        assert (created["type"], updated["type"]) == ("session.created", "session.updated")
        assert created["resume_token"] and created["attachment_generation"] == 1
        session = created["session"]
        assert "capabilities" not in created
        assert session["capabilities"]["supports_session_resume"] is True
        assert session["capabilities"]["chunk_period_ms"] == 1  # loopback: any length
        assert (session["input_audio_format"], session["sample_rate_hz"]) == ("pcm16", 16000)
        assert session["extra_body"] == {"auto_response": True}
        assert updated["session"] == session

        # Half a second at 16 kHz, committed without saying whether to answer.
        for _ in range(5):
            await send(ws, {"type": "input_audio_buffer.append", "audio": tone(0.1),
                            "format": "pcm16", "sample_rate_hz": 16000})  # fmt: skip
        await send(ws, {"type": "input_audio_buffer.commit", "final": True})
        events = await until(ws, "rate_limits.updated")
        types = [e["type"] for e in events]
        assert "error" not in types, events
        assert types.index("conversation.item.added") + 1 == types.index(
            "conversation.item.created"
        )
        (response_created,) = [e for e in events if e["type"] == "response.created"]
        rid = response_created["response_id"]
        assert rid == response_created["response"]["id"]
        deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
        assert {(d["format"], d["sample_rate_hz"]) for d in deltas} == {("pcm16", 24000)}
        durations = [d["metadata"]["audio_duration_ms"] for d in deltas]
        assert durations == sorted(durations)
        assert durations[-1] == pytest.approx(500.0)
        transcript = "".join(
            e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta"
        )
        said = re.search(r"you said ([0-9.]+) seconds", transcript)
        assert said and float(said.group(1)) == pytest.approx(0.5, abs=0.01), transcript
        assert types[-2:] == ["response.done", "rate_limits.updated"]

        # The reference's item id for the response's item.
        await send(ws, {"type": "playback.ack", "played_ms": 500, "committed_ms": 500,
                        "response_id": rid, "item_id": f"item_{rid}"})  # fmt: skip
        acked = await recv(ws)
        assert acked["type"] == "playback.acknowledged", acked
        assert (acked["event"]["response_id"], acked["event"]["played_ms"]) == (rid, 500)


async def test_the_realtime_path_with_duplex_1_speaks_the_same_dialect(bridge_port: int) -> None:
    async with duplex_socket(bridge_port, "/v1/realtime?duplex=1&autostart=0") as ws:
        await send(ws, REFERENCE_OPEN)
        assert [(await recv(ws))["type"] for _ in range(2)] == [
            "session.created",
            "session.updated",
        ]


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("not json", "invalid_json"),
        ("[1, 2]", "bad_event"),
        ('{"type": "session.resume", "session_id": "s"}', "invalid_session_resume"),
    ],
    ids=["not-json", "not-an-object", "malformed-resume"],
)
async def test_a_malformed_first_frame_ends_the_socket_as_the_reference_does(
    bridge_port: int, frame: str, code: str
) -> None:
    async with duplex_socket(bridge_port) as ws:
        await ws.send_str(frame)
        error = await recv(ws)
        assert (error["type"], error["error"]["code"]) == ("error", code)
        closing = await asyncio.wait_for(ws.receive(), 5)
        assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert (ws.close_code, closing.extra) == (1000, code)


async def test_a_bad_first_event_that_is_an_object_is_answered_and_the_socket_stays(
    bridge_port: int,
) -> None:
    # The reference would open a default session first; the bridge opens none for an event it
    # refuses (docs/dialects.md), and the client's next event opens it.
    async with duplex_socket(bridge_port) as ws:
        await send(ws, {"type": "push_text", "event_id": "e1"})  # no text
        first = await recv(ws)
        assert (first["type"], first["error"]["code"]) == ("error", "bad_event")
        await send(ws, REFERENCE_OPEN)
        assert (await recv(ws))["type"] == "session.created"


async def test_an_append_that_names_no_rate_is_at_the_sessions_rate(bridge_port: int) -> None:
    # The reference's precedence: the append's rate, else its format object's, else the
    # session's. This session is at 24 kHz, and its appends say only "pcm16".
    opening = {**REFERENCE_OPEN, "session": {**REFERENCE_OPEN["session"], "sample_rate_hz": 24000}}
    async with duplex_socket(bridge_port) as ws:
        await send(ws, opening)
        created = await recv(ws)
        assert created["session"]["sample_rate_hz"] == 24000
        await send(ws, {"type": "input_audio_buffer.append", "audio": tone(0.5, 24000),
                        "format": "pcm16"})  # fmt: skip
        await send(ws, {"type": "input_audio_buffer.commit"})
        events = await until(ws, "response.done")
        transcript = "".join(
            e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta"
        )
        said = re.search(r"you said ([0-9.]+) seconds", transcript)
        assert said and float(said.group(1)) == pytest.approx(0.5, abs=0.01), transcript


async def speak_half_a_second(ws: Any) -> list[dict[str, Any]]:
    for _ in range(5):
        await send(ws, {"type": "input_audio_buffer.append", "audio": tone(0.1)})
    await send(ws, {"type": "input_audio_buffer.commit", "final": True})
    return await until(ws, "rate_limits.updated")


async def test_every_event_is_numbered_and_a_resume_inside_a_group_misses_nothing(
    bridge_port: int,
) -> None:
    # As vLLM-Omni's client counts: it keeps an event only if its server_event_seq is above the
    # last it saw, and resumes from the last it saw.
    async with duplex_socket(bridge_port) as ws:
        await send(ws, REFERENCE_OPEN)
        created, updated = await recv(ws), await recv(ws)
        turn = await speak_half_a_second(ws)
    assert "server_event_seq" not in created  # outside the journal, as in the reference
    numbered = [updated, *turn]
    assert not [e["type"] for e in numbered if not isinstance(e.get("server_event_seq"), int)]
    seqs = [e["server_event_seq"] for e in numbered]
    assert seqs == sorted(set(seqs))
    # The connection drops right after response.created, inside the group that announces the
    # response (conversation.item.added and .created, output_item.added ... follow it).
    cut = [e["type"] for e in turn].index("response.created")
    cursor = turn[cut]["server_event_seq"]
    async with duplex_socket(bridge_port) as ws:
        await send(ws, {"type": "session.resume", "session_id": created["session"]["id"],
                        "resume_token": created["resume_token"],
                        "last_received_server_event_seq": cursor})  # fmt: skip
        resumed = await recv(ws)
        assert resumed["type"] == "session.resumed", resumed
        replayed = await until(ws, "rate_limits.updated")
    # What the client keeps of the replay is what it missed: the same events, by id and number.
    kept = [e for e in replayed if e.get("server_event_seq", 0) > cursor]
    missed = turn[cut + 1 :]
    assert [(e["event_id"], e["type"], e["server_event_seq"]) for e in kept] == [
        (e["event_id"], e["type"], e["server_event_seq"]) for e in missed
    ]
