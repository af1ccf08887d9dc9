"""Noise reduction through the real bridge, with the official ``openai`` SDK: GA's
``audio.input.noise_reduction`` reaches the session and is echoed back; an engine that reduces
no noise refuses it, typed, and the session goes on. Every frame is checked against OpenAI's
types. (What it does to the words heard: test_noise_reduction_embedded.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from openai import AsyncOpenAI

from tests.bridge.realtime.test_reasoning_and_parallel_calls import until
from tests.bridge.testkit import running_bridge, service_settings
from tests.serving import FAST, serving


@pytest.fixture
async def mirror_port() -> AsyncIterator[int]:
    """A bridge in front of a loopback service in mirror mode, which reduces no noise."""
    async with (
        serving(service_settings(engine_options={"mode": "mirror"})) as running,
        running_bridge(running.target) as port,
    ):
        yield port


@pytest.fixture
async def loopback_port() -> AsyncIterator[int]:
    async with (
        serving(service_settings(engine_options=FAST)) as running,
        running_bridge(running.target) as port,
    ):
        yield port


def _reduction(session: dict) -> object:  # type: ignore[type-arg]
    return session["audio"]["input"]["noise_reduction"]


async def test_the_sdk_turns_noise_reduction_on_changes_it_and_turns_it_off(
    loopback_port: int,
) -> None:
    client = AsyncOpenAI(api_key="k", websocket_base_url=f"ws://127.0.0.1:{loopback_port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        created = (await until(conn, "session.created"))[-1]
        assert _reduction(created["session"]) is None  # off by default, as OpenAI's
        for kind in ("near_field", "far_field"):
            reduction = {"noise_reduction": {"type": kind}}
            await conn.session.update(session={"type": "realtime", "audio": {"input": reduction}})
            updated = (await until(conn, "session.updated"))[-1]
            assert _reduction(updated["session"]) == {"type": kind}
        # An update that does not name it keeps it.
        await conn.session.update(session={"type": "realtime", "instructions": "Be brief."})
        assert _reduction((await until(conn, "session.updated"))[-1]["session"]) == {
            "type": "far_field"
        }
        await conn.session.update(
            session={"type": "realtime", "audio": {"input": {"noise_reduction": None}}}
        )
        assert _reduction((await until(conn, "session.updated"))[-1]["session"]) is None


async def test_an_engine_without_noise_reduction_refuses_it_typed_and_goes_on(
    mirror_port: int,
) -> None:
    client = AsyncOpenAI(api_key="k", websocket_base_url=f"ws://127.0.0.1:{mirror_port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await until(conn, "session.created")
        await conn.session.update(
            session={
                "type": "realtime",
                "instructions": "Never applied.",
                "audio": {"input": {"noise_reduction": {"type": "far_field"}}},
            }
        )
        refusal = (await until(conn, "error"))[-1]["error"]
        assert refusal["code"] == "unsupported_noise_reduction", refusal
        assert refusal["param"] == "noise_reduction.type"
        assert "far_field" in refusal["message"]
        # The session is open and as it was: null (off) is taken by every engine.
        await conn.session.update(
            session={"type": "realtime", "audio": {"input": {"noise_reduction": None}}}
        )
        updated = (await until(conn, "session.updated"))[-1]["session"]
        assert _reduction(updated) is None
        assert "instructions" not in updated


async def test_a_transcription_session_shows_its_noise_reduction(loopback_port: int) -> None:
    client = AsyncOpenAI(api_key="k", websocket_base_url=f"ws://127.0.0.1:{loopback_port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await until(conn, "session.created")
        reduction = {"noise_reduction": {"type": "near_field"}}
        await conn.session.update(session={"type": "transcription", "audio": {"input": reduction}})
        updated = (await until(conn, "session.updated"))[-1]["session"]
        assert updated["type"] == "transcription"
        assert _reduction(updated) == {"type": "near_field"}
