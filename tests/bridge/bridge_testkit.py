"""What the bridge tests share: schema checks, a real service and bridge, a checking client."""

from __future__ import annotations

import asyncio
import contextlib
import io
import subprocess
import wave
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from extension_events import EXTENSION_EVENT, EXTENSION_EVENT_TYPES, STANDARD_EVENT_EXTRAS
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from bridge.app import start_bridge
from omni_grpc import audio
from omni_grpc.server.settings import ServerSettings
from omni_grpc.wire import pb
from tests.serving import settings

OPENAI_SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)


def check_server_event(event: dict[str, Any]) -> None:
    """Validates one event: OpenAI's union, or our extension schema; extras must be known."""
    if event["type"] in EXTENSION_EVENT_TYPES:
        EXTENSION_EVENT.validate_python(event)
        return
    parsed = OPENAI_SERVER_EVENT.validate_python(event)
    assert parsed.type == event["type"]
    allowed = STANDARD_EVENT_EXTRAS["*"] | STANDARD_EVENT_EXTRAS.get(event["type"], frozenset())
    extras = set(parsed.model_extra or ())
    assert extras <= allowed, f"{event['type']} carries undocumented fields {extras - allowed}"


# ---------------------------------------------------------------- a real service and bridge

SPEECH_TEXT = "hello there, this is a test of the websocket bridge"


def service_settings(**overrides: Any) -> ServerSettings:
    """A loopback service on a free port (tests.serving's settings); the tests start the
    bridge in front of it themselves."""
    return settings(**overrides)


@contextlib.asynccontextmanager
async def running_bridge(target: str, **options: Any) -> AsyncIterator[int]:
    """A bridge for ``target`` on a free port; yields the port and stops it afterwards."""
    runner, port = await start_bridge(target, port=0, **options)
    try:
        yield port
    finally:
        await runner.cleanup()


def speech_pcm24() -> bytes:
    """Real speech from espeak-ng, as OpenAI's default input: pcm16 mono at 24 kHz."""
    wav = subprocess.run(
        ["espeak-ng", "-v", "en-us", "-s", "170", "--stdout", SPEECH_TEXT],
        check=True,
        capture_output=True,
        timeout=30,
    ).stdout
    with wave.open(io.BytesIO(wav)) as reader:
        rate, frames = reader.getframerate(), reader.readframes(reader.getnframes())
    samples = audio.decode(frames, pb.AUDIO_ENCODING_PCM16, rate)
    return audio.encode(audio.resample(samples, rate, 24000), pb.AUDIO_ENCODING_PCM16, 24000)


class RealtimeSocket:
    """A websocket to the bridge that checks every event it receives against the schemas."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.received: list[dict[str, Any]] = []

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send_str(orjson.dumps(event).decode())

    async def recv(self, wait_s: float = 5.0) -> dict[str, Any]:
        message = await asyncio.wait_for(self.ws.receive(), wait_s)
        assert message.type is aiohttp.WSMsgType.TEXT, (message.type, message.data, message.extra)
        event: dict[str, Any] = orjson.loads(message.data)
        check_server_event(event)
        self.received.append(event)
        return event

    async def until(self, kind: str, wait_s: float = 10.0) -> list[dict[str, Any]]:
        """Receives events up to and including the first of type ``kind``."""
        events = []
        async with asyncio.timeout(wait_s):
            while True:
                events.append(await self.recv())
                if events[-1]["type"] == kind:
                    return events

    async def closed(self, wait_s: float = 5.0) -> tuple[int | None, str]:
        """Waits for the server to close the socket; returns its code and reason."""
        message = await asyncio.wait_for(self.ws.receive(), wait_s)
        assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), message
        return self.ws.close_code, message.extra or ""


@contextlib.asynccontextmanager
async def realtime_socket(
    port: int, query: str = "model=loopback-test", **options: Any
) -> AsyncIterator[RealtimeSocket]:
    """Connects to the bridge on ``port`` the way a stock client does."""
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"http://127.0.0.1:{port}/v1/realtime?{query}", **options) as ws,
    ):
        yield RealtimeSocket(ws)
