"""Client secrets minted with a session, as OpenAI's are: the official ``openai`` SDK mints one
with a backend's key and a session body, and the socket the secret opens starts its session
with that configuration at once, before its client says anything; a session the bridge cannot
honour is refused at the mint (400, typed, naming the field), and one the service refuses is
answered in band as a refused opening ``session.update`` is, the session opening with the
defaults.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI
from openai.types.realtime import RealtimeSessionCreateResponse

from tests.bridge.testkit import realtime_socket, running_bridge, service_settings
from tests.serving import serving

KEY = "backend-key"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
SESSION = {
    "type": "realtime",
    "instructions": "You are a weather desk.",
    "output_modalities": ["text"],
    "audio": {"output": {"voice": "marin"}},
    "tools": [WEATHER],
    "tool_choice": "required",
}


@pytest.fixture
async def port() -> AsyncIterator[int]:
    """A bridge with a key in front of a keyed loopback service."""
    async with (
        serving(service_settings(api_keys=(KEY,))) as service,
        running_bridge(service.target, api_keys=(KEY,)) as port,
    ):
        yield port


async def mint(port: int, body: dict[str, Any]) -> aiohttp.ClientResponse:
    """POSTs a mint with the backend's key; the body is read before it returns."""
    headers = {"Authorization": f"Bearer {KEY}"}
    url = f"http://127.0.0.1:{port}/v1/realtime/client_secrets"
    async with aiohttp.ClientSession() as http, http.post(url, headers=headers, json=body) as got:
        await got.read()
        return got


def page(secret: str) -> dict[str, Any]:
    """How a page presents a secret: the subprotocol, and no model in the URL."""
    return {"query": "", "protocols": ("realtime", f"openai-insecure-api-key.{secret}")}


async def test_the_sdk_mints_a_session_that_the_socket_starts_with(port: int) -> None:
    async with AsyncOpenAI(api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1") as backend:
        minted = await backend.realtime.client_secrets.create(
            session=SESSION,  # type: ignore[arg-type]  # a plain dict, as JSON would send it
            expires_after={"anchor": "created_at", "seconds": 60},
        )
    assert minted.value.startswith("ek_")
    assert isinstance(minted.session, RealtimeSessionCreateResponse)
    assert minted.session.instructions == SESSION["instructions"]

    async with realtime_socket(port, **page(minted.value)) as socket:
        # Nothing sent: the secret's session opens by itself, configured as minted.
        session = (await socket.until("session.created"))[-1]["session"]
        assert session["instructions"] == SESSION["instructions"]
        assert session["output_modalities"] == ["text"]
        assert session["audio"]["output"]["voice"] == "marin"
        assert session["tools"] == [WEATHER] and session["tool_choice"] == "required"
        # It is a session like any other: a later update lays over the minted configuration.
        await socket.send({"type": "session.update", "session": {"instructions": "Be brief."}})
        updated = (await socket.until("session.updated"))[-1]["session"]
        assert updated["instructions"] == "Be brief." and updated["tools"] == [WEATHER]


@pytest.mark.parametrize(
    ("session", "code", "param"),
    [
        ({"reasoning": {"effort": "low"}}, "unsupported_field", "session.reasoning"),
        ({"type": "translation"}, "unsupported_session_type", "session.type"),
        ({"output_modalities": ["video"]}, "bad_event", "session.output_modalities.0"),
        ({"tools": [{"type": "mcp", "name": "m"}]}, "bad_event", "session.tools.0.type"),
    ],
    ids=["reasoning", "translation", "modality", "mcp"],
)
async def test_a_session_the_bridge_cannot_honour_is_refused_at_the_mint(
    port: int, session: dict[str, Any], code: str, param: str
) -> None:
    refused = await mint(port, {"session": session})
    assert refused.status == 400
    error = (await refused.json())["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
    # The key mints on, and what it mints opens.
    minted = await mint(port, {"session": {"instructions": "ok"}})
    assert minted.status == 200
    async with realtime_socket(port, **page((await minted.json())["value"])) as socket:
        created = (await socket.until("session.created"))[-1]
        assert created["session"]["instructions"] == "ok"


async def test_a_session_the_service_refuses_opens_with_the_defaults_after_the_error(
    port: int,
) -> None:
    odd_rate = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 12345}}}}
    minted = await mint(port, {"session": {"instructions": "x", **odd_rate}})
    assert minted.status == 200  # only the service knows which rates its engine takes
    async with realtime_socket(port, **page((await minted.json())["value"])) as socket:
        events = await socket.until("session.created")
        error = events[0]["error"]
        assert error["code"] == "unsupported_audio_format" and "12345" in error["message"]
        session = events[-1]["session"]
        assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
        assert "instructions" not in session  # refused whole, as an update is


async def test_a_minted_transcription_session_opens_as_one(port: int) -> None:
    audio_in = {"transcription": {"model": "whisper-1", "language": "fr"}, "turn_detection": None}
    minted = await mint(port, {"session": {"type": "transcription", "audio": {"input": audio_in}}})
    assert minted.status == 200
    answer = await minted.json()
    assert (answer["session"]["type"], answer["session"]["object"]) == (
        "transcription",
        "realtime.transcription_session",
    )
    async with realtime_socket(port, **page(answer["value"])) as socket:
        session = (await socket.until("session.created"))[-1]["session"]
        assert session["type"] == "transcription"
        assert session["audio"]["input"]["transcription"] == {
            "model": "loopback-words",
            "language": "fr",
            "prompt": None,
        }
        await socket.send({"type": "response.create"})
        error = (await socket.until("error"))[-1]["error"]
        assert error["code"] == "responses_unsupported"
