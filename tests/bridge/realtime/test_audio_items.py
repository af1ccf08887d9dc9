"""A user item created with its audio, and an item retrieved with its audio, through a real
bridge and a loopback service, as the official ``openai`` SDK sends and reads them; every
frame is checked against OpenAI's types.

The loopback answers with the audio it heard, so its reply shows the engine heard the item's
audio as it hears a committed turn; a retrieved item brings back the audio the engine kept of
it, in the session's input format (24 kHz here, the engine's own 16 kHz in between).
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import orjson
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection

from omni_grpc import audio
from omni_grpc.wire import pb
from tests.bridge.testkit import WITH_EXTENSIONS, check_plain_event, realtime_socket


async def until(conn: AsyncRealtimeConnection, kind: str) -> list[dict[str, Any]]:
    """The connection's events up to the first of ``kind``, each checked as a plain client's."""
    events: list[dict[str, Any]] = []
    while not events or events[-1]["type"] != kind:
        event = orjson.loads(await asyncio.wait_for(conn.recv_bytes(), 10))
        check_plain_event(event)
        events.append(event)
    return events


def samples(pcm16_24k: bytes) -> np.ndarray[Any, np.dtype[np.float64]]:
    return np.asarray(audio.decode(pcm16_24k, pb.AUDIO_ENCODING_PCM16, 24000), dtype=np.float64)


def alike(a: bytes, b: bytes) -> float:
    """How alike two clips of pcm16 at 24 kHz are: the correlation of their samples."""
    x, y = samples(a), samples(b)
    n = min(len(x), len(y))
    return float(np.corrcoef(x[:n], y[:n])[0, 1])


async def test_the_sdk_creates_an_audio_item_hears_it_and_retrieves_its_audio(
    bridge_port: int, speech: bytes
) -> None:
    client = AsyncOpenAI(api_key="k", websocket_base_url=f"ws://127.0.0.1:{bridge_port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await until(conn, "session.created")
        await conn.session.update(
            session={"type": "realtime", "audio": {"input": {"turn_detection": None}}}
        )
        await until(conn, "session.updated")
        part = {"type": "input_audio", "audio": base64.b64encode(speech).decode()}
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [part]}  # type: ignore[list-item]
        )
        added = (await until(conn, "conversation.item.done"))[0]
        assert added["type"] == "conversation.item.added"
        item_id = added["item"]["id"]
        # The conversation's events say the item is audio, without its bytes.
        assert added["item"]["content"] == [{"type": "input_audio", "transcript": None}]

        await conn.response.create()
        events = await until(conn, "response.done")
        assert "error" not in [e["type"] for e in events]
        reply = b"".join(
            base64.b64decode(e["delta"])
            for e in events
            if e["type"] == "response.output_audio.delta"
        )
        # The loopback says back what it heard: the item's audio.
        assert abs(len(reply) - len(speech)) / 48 < 30
        assert alike(reply, speech) > 0.9

        await conn.conversation.item.retrieve(item_id=item_id)
        retrieved = (await until(conn, "conversation.item.retrieved"))[-1]["item"]
        assert retrieved["id"] == item_id
        (content,) = retrieved["content"]
        kept = base64.b64decode(content["audio"])
        # Kept at the engine's 16 kHz, given back at the session's 24 kHz: the same sound.
        assert abs(len(kept) - len(speech)) <= 2 * 24
        assert alike(kept, speech) > 0.95


async def test_a_committed_turn_is_retrieved_with_its_audio(
    bridge_port: int, speech: bytes
) -> None:
    async with realtime_socket(bridge_port, WITH_EXTENSIONS) as socket:
        await socket.until("session.created")
        await socket.send({"type": "session.update", "session": {"turn_detection": None}})
        await socket.until("session.updated")
        chunk = base64.b64encode(speech).decode()
        await socket.send({"type": "input_audio_buffer.append", "audio": chunk})
        await socket.send({"type": "input_audio_buffer.commit"})
        committed = (await socket.until("input_audio_buffer.committed"))[-1]
        await socket.send({"type": "conversation.item.retrieve", "item_id": committed["item_id"]})
        retrieved = (await socket.until("conversation.item.retrieved"))[-1]["item"]
        kept = base64.b64decode(retrieved["content"][0]["audio"])
        assert alike(kept, speech) > 0.95
        # The engine says how much it keeps.
        assert socket.received[0]["capabilities"]["item_audio_kept_ms"] == 30_000
        assert socket.received[0]["capabilities"]["supports_input_audio_items"] is True


async def test_audio_where_it_cannot_be_is_refused_typed_and_the_session_goes_on(
    bridge_port: int,
) -> None:
    async with realtime_socket(bridge_port) as socket:
        await socket.until("session.created")
        torn = {"type": "input_audio", "audio": base64.b64encode(b"\x01\x02\x03").decode()}
        whole = {"type": "input_audio", "audio": base64.b64encode(b"\x01\x02" * 480).decode()}
        text = {"type": "input_text", "text": "and this"}
        cases = [
            ({"role": "user", "content": [torn]}, "bad_audio", None),  # half a sample
            ({"role": "assistant", "content": [whole]}, "bad_event", "item.content.0.audio"),
            ({"role": "user", "content": [text, whole]}, "bad_event", "item.content.1.audio"),
        ]
        for n, (item, code, param) in enumerate(cases):
            event_id = f"bad{n}"
            await socket.send(
                {
                    "type": "conversation.item.create",
                    "event_id": event_id,
                    "item": {"type": "message", **item},
                }
            )
            error = (await socket.until("error"))[-1]["error"]
            assert (error["code"], error["param"], error["event_id"]) == (code, param, event_id)
        # Nothing of them was added; the session takes the next item and answers it.
        await socket.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [whole]},
            }
        )
        added = await socket.until("conversation.item.done")
        assert [e["type"] for e in added] == ["conversation.item.added", "conversation.item.done"]
        await socket.send({"type": "response.create"})
        assert (await socket.until("response.done"))[-1]["response"]["status"] == "completed"
