"""Out-of-band responses through the bridge, with the official ``openai`` SDK: a classification
(``conversation: "none"``, its own ``input`` of an item reference and a text item, ``metadata``,
text output) asked while a spoken turn is being answered, on a real gRPC service (the loopback
engine at twice real time) behind a real bridge.

What OpenAI's guide promises of such a response, checked event by event against the SDK's own
types: it runs beside the spoken answer (which it does not cancel), it reads what it was given and
nothing else, its ``metadata`` comes back on its ``response.created`` and ``response.done``, its
``conversation_id`` is null, and the conversation gains none of its items (no
``conversation.item.*`` event names them, a retrieve does not find them, and the next spoken turn
does not read them). A reference to no item is an error naming the entry, and the session goes on.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection
from openai.types.realtime import ResponseDoneEvent

from tests.bridge.testkit import check_plain_event, running_bridge, service_settings
from tests.serving import serving

# Twice real time: the spoken answer to 3 s of audio takes 1.5 s, time enough for a
# classification to start and end beside it. ``recall`` makes each answer say what of the
# conversation came before its turn, so a test can read what the conversation holds.
ENGINE = {"pace": "realtime", "speed": "2", "recall": "1"}
CHUNK = b"\x00\x08" * 2400  # 100 ms of 24 kHz pcm16
METADATA = {"purpose": "classification", "ticket": "T-17"}


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async with (
        serving(service_settings(engine_options=ENGINE)) as service,
        running_bridge(service.target) as bridge_port,
    ):
        yield bridge_port


async def recv(conn: AsyncRealtimeConnection) -> dict[str, Any]:
    """The next event, checked against OpenAI's types (no extensions were asked for)."""
    raw = await asyncio.wait_for(conn.recv_bytes(), 15)
    event: dict[str, Any] = orjson.loads(raw)
    check_plain_event(event)
    conn.parse_event(raw)  # the SDK reads it too
    return event


async def until(conn: AsyncRealtimeConnection, kind: str, seen: list[dict[str, Any]]) -> Any:
    while True:
        event = await recv(conn)
        seen.append(event)
        if event["type"] == "error" and kind != "error":
            raise AssertionError(event)
        if event["type"] == kind:
            return event


async def typed_item(conn: AsyncRealtimeConnection, text: str, seen: list[dict[str, Any]]) -> str:
    await conn.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    done = await until(conn, "conversation.item.done", seen)
    item_id: str = done["item"]["id"]
    return item_id


async def spoken_turn(conn: AsyncRealtimeConnection, seconds: float) -> None:
    for _ in range(round(seconds * 10)):
        await conn.input_audio_buffer.append(audio=base64.b64encode(CHUNK).decode())
    await conn.input_audio_buffer.commit()
    await conn.response.create()


def classification(input_: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "conversation": "none",
        "metadata": METADATA,
        "output_modalities": ["text"],
        "instructions": "Say whether the customer wants to cancel: yes or no.",
        "max_output_tokens": 64,
        "audio": {"output": {"voice": "marin"}},
        "input": input_,
    }


async def test_a_classification_runs_beside_a_spoken_turn_and_stays_out_of_the_conversation(
    port: int,
) -> None:
    client = AsyncOpenAI(api_key="sk-test", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    seen: list[dict[str, Any]] = []
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await until(conn, "session.created", seen)
        said = await typed_item(conn, "I want to cancel my order", seen)
        await spoken_turn(conn, 3.0)
        spoken = (await until(conn, "response.created", seen))["response"]
        assert spoken["metadata"] is None

        await conn.response.create(
            response=classification(
                [
                    {"type": "item_reference", "id": said},
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "Is that a cancellation?"}],
                    },
                ]
            )
        )
        start = len(seen)
        done: dict[str, dict[str, Any]] = {}
        while len(done) < 2:
            event = await until(conn, "response.done", seen)
            done[event["response"]["id"]] = event["response"]
        during = seen[start:]
        kinds = [(e["type"], e.get("response", {}).get("id")) for e in during]
        side_started = next(i for i, (kind, _) in enumerate(kinds) if kind == "response.created")
        created = during[side_started]["response"]
        side = done[created["id"]]

        # Beside the spoken answer: it began before that answer ended, and ended it not.
        assert side_started < kinds.index(("response.done", spoken["id"]))
        assert done[spoken["id"]]["status"] == "completed"

        # Its metadata on both of its response events; no conversation; text alone.
        assert created["metadata"] == METADATA and side["metadata"] == METADATA
        assert created["conversation_id"] is None and side["conversation_id"] is None
        assert side["output_modalities"] == ["text"] and side["status"] == "completed"
        # Its own cap and voice, as asked (the spoken answer has the session's).
        for response in (created, side):
            assert response["max_output_tokens"] == 64
            assert response["audio"] == {"output": {"voice": "marin"}}
        assert "max_output_tokens" not in done[spoken["id"]] and "audio" not in spoken
        parsed = ResponseDoneEvent.model_validate(
            {"type": "response.done", "event_id": "e", "response": side}
        )
        assert parsed.response.metadata == METADATA
        # It read its input, the referenced item then the given one, and nothing else (the
        # recall names what it read beyond the items it answers).
        [item] = side["output"]
        [part] = item["content"]
        assert part == {
            "type": "output_text",
            "text": (
                'you wrote "I want to cancel my order Is that a cancellation?"; earlier: nothing'
            ),
        }
        assert not any(
            e["type"] == "response.output_audio.delta" and e["response_id"] == side["id"]
            for e in during
        )

        # The conversation gained none of its items.
        conversation_events = [e for e in seen if e["type"].startswith("conversation.item.")]
        assert all(e["item"]["id"] != item["id"] for e in conversation_events)
        await conn.conversation.item.retrieve(item_id=item["id"])
        missing = await until(conn, "error", seen)
        assert missing["error"]["code"] == "item_not_found"

        # The next spoken turn reads the conversation: the typed item and the first answer,
        # not the classification.
        await spoken_turn(conn, 0.5)
        later = (await until(conn, "response.done", seen))["response"]
        heard = later["output"][0]["content"][0]["transcript"]
        assert "I want to cancel my order" in heard
        assert "you said 3.00 seconds of audio" in heard
        assert "cancellation" not in heard


async def test_a_reference_to_no_item_is_an_error_naming_it_and_the_session_goes_on(
    port: int,
) -> None:
    client = AsyncOpenAI(api_key="sk-test", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    seen: list[dict[str, Any]] = []
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await until(conn, "session.created", seen)
        await conn.response.create(
            response=classification([{"type": "item_reference", "id": "item_nowhere"}]),
            event_id="classify-1",
        )
        error = (await until(conn, "error", seen))["error"]
        assert (error["code"], error["param"], error["event_id"]) == (
            "item_not_found",
            "input.0.id",
            "classify-1",
        )
        assert "item_nowhere" in error["message"]

        # The session goes on: an empty input is no context at all, and is answered.
        await conn.response.create(response=classification([]))
        side = (await until(conn, "response.done", seen))["response"]
        assert side["metadata"] == METADATA and side["conversation_id"] is None
        assert side["output"][0]["content"][0]["text"] == "you sent an empty item; earlier: nothing"
        # And so is a spoken turn, in the conversation.
        await spoken_turn(conn, 0.5)
        spoken = (await until(conn, "response.done", seen))["response"]
        assert spoken["status"] == "completed" and spoken["metadata"] is None
        assert "earlier: nothing" in spoken["output"][0]["content"][0]["transcript"]
