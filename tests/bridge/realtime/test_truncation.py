"""``session.truncation`` honoured, through a real bridge in front of a real gRPC service on the
loopback engine, driven by the official ``openai`` SDK; every frame is checked against OpenAI's
types.

The loopback counts a word a token, and with ``recall`` each answer lists the items it read
before its turn ("...; earlier: a | b"), so what a cut dropped is visible in the answer. A long
conversation under ``retention_ratio`` (0.5 of a ``post_instructions`` limit of 40) drops its
oldest items once past 40 tokens, down to at most 20, and then reads from the same first item
for the following turns (the stable prompt prefix OpenAI's ratio is for), while ``auto`` moves
its start at every turn once full. ``disabled`` over the engine's context fails the response
typed (``response.done`` failed, ``context_length_exceeded``), and the session goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection

from tests.bridge.testkit import check_plain_event, running_bridge, service_settings
from tests.serving import serving

# A notional context of 60 tokens (words), for "disabled" to pass.
ENGINE = {"pace": "fast", "recall": "1", "context_tokens": "60"}
RATIO = {
    "type": "retention_ratio",
    "retention_ratio": 0.5,
    "token_limits": {"post_instructions": 40},
}


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async with (
        serving(service_settings(engine_options=ENGINE)) as service,
        running_bridge(service.target) as bridge_port,
    ):
        yield bridge_port


async def until(conn: AsyncRealtimeConnection, kind: str) -> list[dict[str, Any]]:
    """The connection's events up to the first of ``kind``, each checked as a plain client's
    and read by the SDK; an ``error`` fails the test unless it is what is awaited."""
    events: list[dict[str, Any]] = []
    while not events or events[-1]["type"] != kind:
        raw = await asyncio.wait_for(conn.recv_bytes(), 15)
        event = orjson.loads(raw)
        check_plain_event(event)
        conn.parse_event(raw)
        assert event["type"] != "error" or kind == "error", event
        events.append(event)
    return events


async def configure(conn: AsyncRealtimeConnection, truncation: Any) -> dict[str, Any]:
    await conn.session.update(
        session={"type": "realtime", "output_modalities": ["text"], "truncation": truncation}
    )
    session: dict[str, Any] = (await until(conn, "session.updated"))[-1]["session"]
    return session


async def turn(conn: AsyncRealtimeConnection, number: int) -> dict[str, Any]:
    """A typed user turn of four words ("t<number> a b c") and the response to it."""
    text = f"t{number} a b c"
    await conn.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    await conn.response.create()
    response: dict[str, Any] = (await until(conn, "response.done"))[-1]["response"]
    return response


def recalled(response: dict[str, Any]) -> list[str]:
    """The earlier items the answer read, oldest first, as the loopback lists them."""
    words = response["output"][0]["content"][0]["text"]
    listed = words.split("; earlier: ", 1)[1]
    return [] if listed == "nothing" else listed.split(" | ")


def tokens(entries: list[str]) -> int:
    return sum(len(entry.split()) for entry in entries)


async def test_retention_ratio_drops_the_oldest_and_keeps_its_start(port: int) -> None:
    client = AsyncOpenAI(api_key="k", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        created = (await until(conn, "session.created"))[-1]
        assert created["session"]["truncation"] == "auto"  # OpenAI's default
        assert (await configure(conn, RATIO))["truncation"] == RATIO

        firsts, reads = [], []
        for number in range(10):
            response = await turn(conn, number)
            assert response["status"] == "completed"
            earlier = recalled(response)
            firsts.append(earlier[0] if earlier else "")
            # Usage says what was read: the earlier items and this turn's four words.
            read = response["usage"]["input_tokens"]
            assert read == tokens(earlier) + 4
            assert read <= 40
            reads.append(read)

    # A user turn is 4 words, its answer 'you wrote "tN a b c"' 6: 10 tokens a turn. Turns 0-3
    # read everything (4, 14, 24, 34); turn 4 (44) passes 40 and is cut to at most 20; turns
    # 5-6 read from that same first item (30, 40); turn 7 (50) is cut again, and so on.
    assert reads == [4, 14, 24, 34, 20, 30, 40, 20, 30, 40]
    assert firsts[1:4] == ["t0 a b c"] * 3
    assert firsts[4:7] == ['you wrote "t2 a b c"'] * 3  # t0, t1 and t2's question dropped
    assert firsts[7:] == ['you wrote "t5 a b c"'] * 3
    # The oldest turns are gone from what the model reads, but the start stays between cuts.
    assert len(set(firsts[4:])) == 2


async def test_auto_moves_its_start_at_every_turn_once_full(port: int) -> None:
    client = AsyncOpenAI(api_key="k", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await until(conn, "session.created")
        assert (await configure(conn, "auto"))["truncation"] == "auto"
        firsts, reads = [], []
        for number in range(9):
            response = await turn(conn, number)
            earlier = recalled(response)
            firsts.append(earlier[0] if earlier else "")
            reads.append(response["usage"]["input_tokens"])
    # The engine's context of 60 tokens: full at turn 6 (64), then each turn drops the oldest.
    assert reads[:6] == [4, 14, 24, 34, 44, 54]
    assert all(read <= 60 for read in reads[6:])
    assert len(set(firsts[6:])) == 3  # a new first item every turn


async def test_disabled_over_the_context_fails_typed_and_the_session_goes_on(port: int) -> None:
    client = AsyncOpenAI(api_key="k", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await until(conn, "session.created")
        assert (await configure(conn, "disabled"))["truncation"] == "disabled"
        for number in range(6):  # 4 to 54 tokens: within the engine's 60
            assert (await turn(conn, number))["status"] == "completed"

        failed = await turn(conn, 6)  # 64 tokens: over, and nothing may be dropped
        assert failed["status"] == "failed"
        assert failed["status_details"]["type"] == "failed"
        assert failed["status_details"]["error"] == {
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
        assert failed["usage"]["input_tokens"] == 0  # nothing was read

        # The session goes on: under auto the next turn is answered, its oldest items dropped.
        assert (await configure(conn, "auto"))["truncation"] == "auto"
        answered = await turn(conn, 7)
        assert answered["status"] == "completed"
        earlier = recalled(answered)
        # 68 tokens (the failed response's item is empty): t0's question and answer dropped.
        assert earlier[0] == "t1 a b c"
        assert earlier[-2:] == ['you wrote "t5 a b c"', "t6 a b c"]
        assert answered["usage"]["input_tokens"] == 58


async def test_a_ratio_out_of_range_is_refused_naming_it(port: int) -> None:
    client = AsyncOpenAI(api_key="k", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await until(conn, "session.created")
        await conn.session.update(
            session={
                "type": "realtime",
                "truncation": {"type": "retention_ratio", "retention_ratio": 1.5},
            }
        )
        error = (await until(conn, "error"))[-1]["error"]
        assert error["code"] == "invalid_session_config"
        assert error["param"].endswith("truncation.retention_ratio")
        # Nothing of it was applied, and the session answers.
        assert (await configure(conn, RATIO))["truncation"] == RATIO
