"""The official ``openai`` SDK's realtime client against the bridge, in front of a real service.

The SDK parses events leniently (an unknown type comes back as something), so the test reads
raw frames with ``recv_bytes`` and validates each one strictly, against OpenAI's own
``RealtimeServerEvent`` union or against our extension schema, and also hands each to the
SDK's own parser to make sure it yields the typed event a user of the SDK would get.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import orjson
from openai import AsyncOpenAI
from openai.types.realtime import ResponseAudioDeltaEvent, ResponseDoneEvent, SessionCreatedEvent

from omni_cli.config import ServeSettings
from omni_cli.launch import start_service
from omni_grpc import audio
from omni_grpc.wire import pb
from tests.bridge.testkit import check_plain_event, service_settings


async def test_sdk_session_update_append_commit_response(bridge_port: int, speech: bytes) -> None:
    client = AsyncOpenAI(api_key="test-key", websocket_base_url=f"ws://127.0.0.1:{bridge_port}/v1")
    events: list[dict[str, Any]] = []
    parsed: list[Any] = []

    async with client.realtime.connect(model="gpt-realtime") as conn:

        async def next_event() -> dict[str, Any]:
            raw = await asyncio.wait_for(conn.recv_bytes(), 10)
            event = orjson.loads(raw)
            check_plain_event(event)
            events.append(event)
            parsed.append(conn.parse_event(raw))
            return event

        assert (await next_event())["type"] == "session.created"
        await conn.session.update(
            session={
                "type": "realtime",
                "instructions": "Answer briefly.",
                "output_modalities": ["audio"],
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "turn_detection": None,
                    },
                    "output": {"format": {"type": "audio/pcm", "rate": 24000}},
                },
            }
        )
        updated = await next_event()
        assert updated["type"] == "session.updated"
        assert updated["session"]["instructions"] == "Answer briefly."
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
        # 100 ms appends, as a microphone client would send them.
        for start in range(0, len(speech), 4800):
            await conn.input_audio_buffer.append(
                audio=base64.b64encode(speech[start : start + 4800]).decode()
            )
        await conn.input_audio_buffer.commit()
        await conn.response.create()
        while (await next_event())["type"] != "response.done":
            pass

    types = [e["type"] for e in events]
    assert "error" not in types, [e for e in events if e["type"] == "error"]
    start = types.index("response.created")
    assert types[start : start + 4] == [
        "response.created",
        "conversation.item.added",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-6:] == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    assert types.index("input_audio_buffer.committed") < start
    assert isinstance(parsed[0], SessionCreatedEvent)
    assert isinstance(parsed[-1], ResponseDoneEvent)
    assert parsed[-1].response.status == "completed"

    # The loopback answers with the turn's own audio: as long as what we said, and audible.
    deltas = [p for p in parsed if isinstance(p, ResponseAudioDeltaEvent)]
    reply = b"".join(base64.b64decode(d.delta) for d in deltas)
    said_ms = len(speech) / 48
    assert abs(len(reply) / 48 - said_ms) < 30, (len(reply) / 48, said_ms)
    level = float(abs(audio.decode(reply, pb.AUDIO_ENCODING_PCM16, 24000)).mean())
    assert level > 0.01
    transcript = "".join(
        e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta"
    )
    done = next(e for e in events if e["type"] == "response.output_audio_transcript.done")
    assert transcript == done["transcript"] and transcript.startswith("you said")
    assert all(len(orjson.dumps(e)) < 256 * 1024 for e in events)
    # Journaled events count up from 1 with no gaps and no repeats.
    seqs = [e["server_event_seq"] for e in events if "server_event_seq" in e]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_sdk_through_the_bridge_the_service_starts_itself() -> None:
    """``omni-grpc serve`` runs this bridge next to gRPC (``start_service``); the SDK reaches it."""
    running = await start_service(ServeSettings(server=service_settings(), http_port=0))
    try:
        assert running.http_port
        client = AsyncOpenAI(api_key="k", base_url=f"http://127.0.0.1:{running.http_port}/v1")
        async with client.realtime.connect(model="gpt-realtime") as conn:
            first = await asyncio.wait_for(conn.recv(), 10)
            assert isinstance(first, SessionCreatedEvent)
            await conn.send({"type": "input_audio_buffer.append", "audio": "AAAAAA=="})
            await conn.input_audio_buffer.commit()
            committed = await asyncio.wait_for(conn.recv(), 10)
            assert committed.type == "input_audio_buffer.committed"
    finally:
        await running.stop()
