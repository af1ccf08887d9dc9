"""vLLM-Omni's own duplex client, unchanged, against the bridge's duplex endpoint.

Runs in ``.venv-vllm-omni`` (marked ``vllm_omni``), where vLLM-Omni's package, and with it
``vllm_omni.clients.duplex.DuplexClient``, is installed. The client builds its own URL
(``/v1/realtime?duplex=1&autostart=0``), opens with its default ``SessionConfig`` (pcm16 at
16 kHz in, ``extra_body.auto_response``), commits without saying whether to answer, acks
playback with the reference's item ids, and resumes by itself when its connection drops. The
service behind the bridge is the real gRPC service, first with the loopback engine, which plays
each turn back and says how long it was (a turn read at the wrong rate would say so), then
with the vllm-omni engine on vLLM-Omni's own session layer (tests/vllm/omni/harness.py).
"""

from __future__ import annotations

import asyncio
import math
import re
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from omni_grpc.server.app import start_server
from tests.bridge.testkit import running_bridge, service_settings

from .test_vllm_omni import OMNI_WARNING_FILTERS

# vLLM-Omni's real session layer behind the service's vllm-omni engine: the harness fixtures
# of test_vllm_omni_bridge.py, used by the second test.
from .test_vllm_omni_bridge import bridge_port as omni_bridge_port  # noqa: F401
from .test_vllm_omni_bridge import layer  # noqa: F401

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.vllm_omni,
    *(pytest.mark.filterwarnings(f) for f in OMNI_WARNING_FILTERS),
]
INPUT_RATE_HZ = 16000  # the reference's default input, which the client sends
OUTPUT_RATE_HZ = 24000


def tone_pcm16(seconds: float) -> bytes:
    """A voiced tone as pcm16 at 16 kHz, what the client's default config sends."""
    count = round(INPUT_RATE_HZ * seconds)
    samples = (round(8000 * math.sin(2 * math.pi * 220 * n / INPUT_RATE_HZ)) for n in range(count))
    return struct.pack(f"<{count}h", *samples)


@pytest.fixture
async def bridge_url() -> AsyncIterator[str]:
    """A bridge in front of a loopback service that answers as fast as it is read."""
    service = await start_server(service_settings(engine_options={"pace": "fast"}))
    try:
        async with running_bridge(service.target) as port:
            yield f"ws://127.0.0.1:{port}"
    finally:
        await service.stop()


class DroppableConnections:
    """The client's ``connect`` hook: websockets' own connection, kept so the test can cut it
    the way a network does (the client is not told; it finds out and resumes)."""

    def __init__(self) -> None:
        self.sockets: list[Any] = []
        self.urls: list[str] = []

    async def __call__(self, url: str) -> Any:
        import websockets

        socket = await websockets.connect(url, max_size=64 << 20)
        self.sockets.append(socket)
        self.urls.append(url)
        return socket

    async def drop(self) -> None:
        # Abort the TCP connection without a close handshake: a cut, not a goodbye.
        self.sockets[-1].transport.abort()


async def collect(client: Any, into: list[dict[str, Any]]) -> None:
    async for event in client.events():
        into.append(event.raw)


async def one_turn(client: Any, seconds: float) -> tuple[Any, bytes]:
    """Streams ``seconds`` of audio, commits as the client does, and plays the answer,
    acking playback as it goes; returns the response handle and its audio."""
    await client.stream_pcm(tone_pcm16(seconds), chunk_ms=200, realtime=False)
    await client.commit()
    audio = b""
    async for response in client.responses():
        if response.decision == "listen":
            continue
        async for chunk in response.audio():
            audio += chunk
            await client.ack_playback(
                response.played_ms,
                response_id=response.response_id,
                item_id=f"item_{response.response_id}",
            )
        await response.wait(timeout_s=10)
        return response, audio
    raise AssertionError("the session ended before a response")


def said_seconds(transcript: str) -> float:
    match = re.search(r"you said ([0-9.]+) seconds", transcript)
    assert match, transcript
    return float(match.group(1))


async def test_a_full_turn_with_defaults_playback_acks_and_a_resume(bridge_url: str) -> None:
    from vllm_omni.clients.duplex import DuplexClient, ReconnectPolicy, SessionConfig

    connections = DroppableConnections()
    events: list[dict[str, Any]] = []
    client = DuplexClient(
        bridge_url,
        model="loopback",
        config=SessionConfig(),  # the client's defaults
        reconnect=ReconnectPolicy(max_attempts=5, backoff_s=(0.05, 0.2)),
        heartbeat_interval_s=None,
        connect=connections,
    )
    async with client:
        watcher = asyncio.create_task(collect(client, events))
        # The handshake: the client adopted the session the bridge announced.
        assert client.session_id and client.resume_token
        assert "duplex=1" in connections.urls[0] and "autostart=0" in connections.urls[0]
        capabilities = client.session_info["capabilities"]
        assert isinstance(capabilities, dict)
        assert capabilities["supports_session_resume"] is True
        assert client.session_info["input_audio_format"] == "pcm16"
        assert client.session_info["sample_rate_hz"] == INPUT_RATE_HZ

        # A full turn: 1 s at 16 kHz in, answered without response.create, heard as 1 s.
        response, audio = await one_turn(client, 1.0)
        assert response.decision == "speak"
        assert response.done_event is not None and response.done_event.type == "response.done"
        assert said_seconds(response.transcript) == pytest.approx(1.0, abs=0.01)
        assert len(audio) == 2 * OUTPUT_RATE_HZ  # 1 s of pcm16 at 24 kHz
        assert response.played_ms == pytest.approx(1000.0)
        await asyncio.sleep(0.2)  # let the last acknowledgement arrive
        acknowledged = [e for e in events if e["type"] == "playback.acknowledged"]
        assert acknowledged, [e["type"] for e in events]
        assert acknowledged[-1]["event"]["response_id"] == response.response_id
        assert acknowledged[-1]["event"]["played_ms"] == pytest.approx(1000.0)
        assert not [e for e in events if e["type"] == "error"], events

        # The connection drops; the client resumes the same session by itself.
        session_id, token = client.session_id, client.resume_token
        await connections.drop()
        await client.wait_for("session.resumed", timeout_s=10)
        assert len(connections.sockets) == 2
        assert client.session_id == session_id
        assert client.resume_token and client.resume_token != token  # rotated

        # The resumed session goes on: a second turn, of another length.
        response, audio = await one_turn(client, 0.6)
        assert said_seconds(response.transcript) == pytest.approx(0.6, abs=0.01)
        assert len(audio) == round(2 * OUTPUT_RATE_HZ * 0.6)
        assert not [e for e in events if e["type"] == "error"], events
        # The client acked every numbered event, on both connections, and saw none twice.
        seqs = [e["server_event_seq"] for e in events if "server_event_seq" in e]
        assert seqs == sorted(set(seqs))
        await client.close()
        watcher.cancel()
    types = [e["type"] for e in events]
    assert "connection.resumed" in types
    assert types[-1] == "session.closed"


async def test_the_client_against_vllm_omnis_own_session_layer(
    layer: Any,  # noqa: F811 (the imported fixture)
    omni_bridge_port: int,  # noqa: F811
) -> None:
    """The same client, defaults and all, with vLLM-Omni's session layer deciding: the model
    speaks, the client plays and acks with the reference's item id (the session layer itself
    checks it), the connection drops and is resumed, and the model speaks again."""
    from vllm_omni.clients.duplex import DuplexClient, ReconnectPolicy, SessionConfig

    connections = DroppableConnections()
    events: list[dict[str, Any]] = []
    client = DuplexClient(
        f"ws://127.0.0.1:{omni_bridge_port}",
        model="openbmb/MiniCPM-o-4_5",
        config=SessionConfig(),
        reconnect=ReconnectPolicy(max_attempts=5, backoff_s=(0.05, 0.2)),
        heartbeat_interval_s=None,
        connect=connections,
    )

    async def spoken(text: str, seconds: float) -> tuple[Any, bytes]:
        before = len(layer.model.submissions)
        await client.stream_pcm(tone_pcm16(1.2), chunk_ms=200, realtime=False)
        await layer.until_submitted(before + 1)
        (duplex_id,) = layer.manager.runners
        assert layer.speak(duplex_id, text, seconds, turn_end=True)
        audio = b""
        async for response in client.responses():
            if response.decision == "listen":
                continue
            async for chunk in response.audio():
                audio += chunk
                await client.ack_playback(
                    response.played_ms,
                    response_id=response.response_id,
                    item_id=f"item_{response.response_id}",
                )
            await response.wait(timeout_s=10)
            return response, audio
        raise AssertionError("the session ended before a response")

    async with client:
        watcher = asyncio.create_task(collect(client, events))
        assert client.session_info["capabilities"]["chunk_period_ms"] == 1000  # type: ignore[index]
        response, audio = await spoken("hello there.", 1.0)
        assert response.transcript == "hello there."
        assert len(audio) == 2 * OUTPUT_RATE_HZ
        await asyncio.sleep(0.2)
        acknowledged = [e for e in events if e["type"] == "playback.acknowledged"]
        assert acknowledged and acknowledged[-1]["event"]["played_ms"] == pytest.approx(1000.0)
        assert not [e for e in events if e["type"] == "error"], events

        token = client.resume_token
        await connections.drop()
        await client.wait_for("session.resumed", timeout_s=10)
        assert client.resume_token != token

        response, audio = await spoken("again.", 0.5)
        assert response.transcript == "again."
        assert len(audio) == OUTPUT_RATE_HZ
        assert not [e for e in events if e["type"] == "error"], events
        await client.close()
        watcher.cancel()
    assert [e["type"] for e in events][-1] == "session.closed"
