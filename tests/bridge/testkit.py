"""What the bridge tests share: schema checks, a real service and bridge, a checking client."""

from __future__ import annotations

import asyncio
import contextlib
import io
import subprocess
import wave
from collections.abc import AsyncIterator, Iterator
from typing import Any, get_args

import aiohttp
import orjson
from openai.types.realtime import RealtimeServerEvent
from pydantic import BaseModel, TypeAdapter

from bridge.app import start_bridge
from bridge.options import BridgeOptions
from omni_grpc import audio
from omni_grpc.server.app import RunningServer
from omni_grpc.server.local import LocalService
from omni_grpc.server.settings import ServerSettings
from omni_grpc.wire import pb
from tests.bridge.extension_events import (
    EXTENSION_EVENT,
    EXTENSION_EVENT_TYPES,
    PLAIN_EVENT_EXTRAS,
    STANDARD_EVENT_EXTRAS,
)
from tests.serving import serving, settings

OPENAI_SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)
# OpenAI's union is not discriminated for pydantic (the SDK's own discriminator is its own
# marker), so a failing event would get one error per member: each event type's model instead.
OPENAI_EVENT_MODELS: dict[str, type[BaseModel]] = {
    get_args(model.model_fields["type"].annotation)[0]: model
    for model in get_args(get_args(RealtimeServerEvent)[0])
}


def _extra_paths(node: Any, prefix: str = "") -> Iterator[str]:
    """The dotted path of every field a parsed OpenAI model holds beyond its schema, at any
    depth (OpenAI's models allow extra fields, so validation alone never notices them)."""
    if isinstance(node, BaseModel):
        for name in node.model_extra or ():
            yield f"{prefix}{name}"
        for name in type(node).model_fields:
            yield from _extra_paths(getattr(node, name), f"{prefix}{name}.")
    elif isinstance(node, list):
        for each in node:
            yield from _extra_paths(each, prefix)


def check_server_event(event: dict[str, Any], *, extensions: bool = True) -> None:
    """Validates one event strictly: OpenAI's GA model of its type (no coercion), or, for a
    client that asked for the duplex extensions, our extension schema. Fields beyond GA's
    must be the documented ones: the plain dialect's few, or also the extensions."""
    kind = event["type"]
    if kind in EXTENSION_EVENT_TYPES:
        assert extensions, f"{kind} sent to a client that did not ask for extensions"
        EXTENSION_EVENT.validate_python(event)
        return
    assert kind in OPENAI_EVENT_MODELS, f"{kind} is not an OpenAI server event"
    parsed = OPENAI_EVENT_MODELS[kind].model_validate(event, strict=True)
    allowed = PLAIN_EVENT_EXTRAS.get(kind, frozenset())
    if extensions:
        allowed |= STANDARD_EVENT_EXTRAS["*"] | STANDARD_EVENT_EXTRAS.get(kind, frozenset())
    extras = set(_extra_paths(parsed))
    assert extras <= allowed, f"{kind} carries undocumented fields {extras - allowed}"


def check_plain_event(event: dict[str, Any]) -> None:
    """Validates one event as a client that did not ask for the extensions must get it."""
    check_server_event(event, extensions=False)


# ---------------------------------------------------------------- a real service and bridge

# The query of a stock client that asks for the duplex extensions.
WITH_EXTENSIONS = "model=loopback-test&extensions=1"
SPEECH_TEXT = "hello there, this is a test of the websocket bridge"


def service_settings(**overrides: Any) -> ServerSettings:
    """A loopback service on a free port (tests.serving's settings); the tests start the
    bridge in front of it themselves."""
    return settings(**overrides)


@contextlib.asynccontextmanager
async def running_bridge(target: str | RunningServer, **options: Any) -> AsyncIterator[int]:
    """A bridge for ``target`` on a free port, with ``options`` (fields of BridgeOptions);
    yields the port and stops it afterwards.

    Given the running service itself, the bridge reaches it in-process (as ``omni-grpc serve``
    does) instead of over gRPC."""
    local = None
    if isinstance(target, RunningServer):
        # The entry point the launcher hands its bridge: the server's keys and stream cap.
        assert isinstance(target.local, LocalService)
        local, target = target.local, target.target
    runner, port = await start_bridge(target, BridgeOptions(port=0, **options), local=local)
    try:
        yield port
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def embedded_bridge() -> AsyncIterator[int]:
    """A bridge in front of the embedded engine (Whisper, Silero, SmolLM2 judging the end of
    turns, the echo responder at real-time pace): the engine that hears turn-taking. Its
    tests load models and run espeak-ng: mark them ``model`` and ``subprocess``."""
    options = {"responder": "echo", "turn_judge": "on", "pace": "realtime"}
    async with (
        serving(settings(engine="embedded", engine_options=options)) as service,
        running_bridge(service) as port,
    ):
        yield port


def speech_pcm24(text: str = SPEECH_TEXT) -> bytes:
    """Real speech from espeak-ng, as OpenAI's default input: pcm16 mono at 24 kHz."""
    wav = subprocess.run(
        ["espeak-ng", "-v", "en-us", "-s", "170", "--stdout", text],
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

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, *, extensions: bool) -> None:
        self.ws = ws
        self.extensions = extensions  # whether it asked for the duplex extensions
        self.received: list[dict[str, Any]] = []

    async def send(self, event: dict[str, Any]) -> None:
        if event.get("type") == "session.resume":
            self.extensions = True  # as the bridge does: only a duplex client resumes
        await self.ws.send_str(orjson.dumps(event).decode())

    async def recv(self, wait_s: float = 5.0) -> dict[str, Any]:
        message = await asyncio.wait_for(self.ws.receive(), wait_s)
        assert message.type is aiohttp.WSMsgType.TEXT, (message.type, message.data, message.extra)
        event: dict[str, Any] = orjson.loads(message.data)
        check_server_event(event, extensions=self.extensions)
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
    """Connects to the bridge on ``port`` the way a stock client does; ``extensions=1`` in the
    query asks for the duplex extensions."""
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"http://127.0.0.1:{port}/v1/realtime?{query}", **options) as ws,
    ):
        yield RealtimeSocket(ws, extensions="extensions=1" in query.split("&"))
