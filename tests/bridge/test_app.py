"""The bridge over real sockets: handshake, auth, refusals, close codes, big frames."""

from __future__ import annotations

import asyncio
import base64

import aiohttp
import pytest

from bridge.app import BRIDGE, start_bridge
from bridge.options import BridgeOptions
from bridge.relay import RelayState
from omni_grpc.server.app import RunningServer, start_server
from tests.bridge.testkit import WITH_EXTENSIONS, realtime_socket, running_bridge, service_settings

APPEND_100MS = {
    "type": "input_audio_buffer.append",
    "audio": base64.b64encode(b"\x00\x08" * 2400).decode(),
}


async def test_session_created_comes_first_and_names_the_model(bridge_port: int) -> None:
    async with realtime_socket(bridge_port, "model=gpt-realtime&extensions=1") as ws:
        created = await ws.recv()
        assert created["type"] == "session.created"
        assert created["session"]["model"] == "gpt-realtime"
        assert created["resume_token"] and created["attachment_generation"] == 1


async def test_bad_input_gets_nested_errors_and_the_socket_stays_open(bridge_port: int) -> None:
    async with realtime_socket(bridge_port, WITH_EXTENSIONS) as ws:
        await ws.recv()
        await ws.ws.send_str("{this is not json")
        await ws.send({"type": "response.dance", "event_id": "c1"})
        await ws.send(
            {"type": "input_audio_buffer.append", "event_id": "c2", "audio": "@@not base64@@"}
        )
        await ws.send({"type": "playback.ack", "event_id": "c3", "played_ms": "soon"})
        await ws.ws.send_bytes(b"\x00\x01")
        errors = [(await ws.recv())["error"] for _ in range(5)]
        assert [(e["code"], e["event_id"]) for e in errors] == [
            ("invalid_json", None),
            ("unknown_event", "c1"),
            ("bad_audio", "c2"),
            ("bad_event", "c3"),
            ("bad_event", None),
        ]
        assert all(e["type"] == "invalid_request_error" and e["message"] for e in errors)
        # Still open, and the numbering behind it is intact: the next commands apply.
        await ws.send({"type": "session.heartbeat"})
        assert (await ws.recv())["type"] == "session.heartbeat_ack"
        await ws.send(APPEND_100MS)
        await ws.send({"type": "input_audio_buffer.commit", "create_response": True})
        events = await ws.until("response.done")
        assert "error" not in [e["type"] for e in events]


async def test_service_refusals_arrive_as_journaled_errors(bridge_port: int) -> None:
    async with realtime_socket(bridge_port, WITH_EXTENSIONS) as ws:
        await ws.recv()
        await ws.send({"type": "input_audio_buffer.commit", "event_id": "empty"})
        error = await ws.recv()
        assert error["error"]["code"] == "input_audio_buffer_empty"
        assert error["error"]["event_id"] == "empty"
        assert error["server_event_seq"] == 1


async def test_first_session_update_opens_with_its_configuration(bridge_port: int) -> None:
    async with realtime_socket(bridge_port, "") as ws:
        await ws.send(
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "model": "m2",
                    "instructions": "Hi.",
                    "audio": {"input": {"format": {"type": "audio/pcmu"}}},
                },
            }
        )
        created = await ws.recv()
        assert created["type"] == "session.created"
        session = created["session"]
        assert (session["model"], session["instructions"]) == ("m2", "Hi.")
        assert session["audio"]["input"]["format"] == {"type": "audio/pcmu"}


async def test_another_first_event_opens_a_default_session_then_applies(bridge_port: int) -> None:
    async with realtime_socket(bridge_port, "") as ws:
        await ws.send({**APPEND_100MS, "event_id": "first"})
        assert (await ws.recv())["type"] == "session.created"
        await ws.send({"type": "input_audio_buffer.commit"})
        committed = await ws.recv()
        assert committed["type"] == "input_audio_buffer.committed"


async def test_a_relay_goes_from_handshake_to_relaying_and_ends_closed(
    service: RunningServer,
) -> None:
    runner, port = await start_bridge(service.target, BridgeOptions(port=0))
    try:
        async with realtime_socket(port, "") as ws:
            # Answered from the handshake: the relay exists and waits for a first event.
            await ws.ws.send_bytes(b"\x00")
            assert (await ws.recv())["error"]["code"] == "bad_event"
            (relay,) = runner.app[BRIDGE].relays
            assert relay.state is RelayState.HANDSHAKE
            await ws.send({"type": "session.update", "session": {"model": "m"}})
            assert (await ws.recv())["type"] == "session.created"
            assert relay.state is RelayState.RELAYING
            # Stopping closes the socket, which answers the close while the bridge stops.
            stopping = asyncio.create_task(runner.cleanup())
            assert (await ws.closed())[0] == 1001
            await stopping
            assert relay.state is RelayState.CLOSED and not runner.app[BRIDGE].relays
    finally:
        await runner.cleanup()


async def test_no_first_event_in_time_closes_with_1008(service: RunningServer) -> None:
    async with (
        running_bridge(service.target, config_timeout_s=0.3) as port,
        realtime_socket(port, "") as ws,
    ):
        assert (await ws.recv())["error"]["code"] == "config_timeout"
        assert (await ws.closed())[0] == 1008


async def test_close_ends_the_session_with_1000(bridge_port: int) -> None:
    async with realtime_socket(bridge_port, WITH_EXTENSIONS) as ws:
        await ws.recv()
        await ws.send({"type": "session.close", "reason": "done here"})
        closed = await ws.recv()
        assert (closed["type"], closed["reason"]) == ("session.closed", "done here")
        assert await ws.closed() == (1000, "session_closed")


async def test_bridge_keys(service: RunningServer) -> None:
    async with running_bridge(service.target, api_keys=("k1", "k2")) as port:
        # Refused before the upgrade (tests/bridge/test_gate.py has the details).
        for headers in ({}, {"Authorization": "Bearer k3"}):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                async with realtime_socket(port, headers=headers):
                    pass
            assert refused.value.status == 401
        async with realtime_socket(port, headers={"Authorization": "Bearer k2"}) as ws:
            assert (await ws.recv())["type"] == "session.created"
        browser = ("realtime", "openai-insecure-api-key.k1", "openai-beta.realtime-v1")
        async with realtime_socket(port, protocols=browser) as ws:
            assert ws.ws.protocol == "realtime"  # echoed, or a browser drops the socket
            assert (await ws.recv())["type"] == "session.created"


async def test_the_key_travels_on_to_a_keyed_service() -> None:
    keyed = await start_server(service_settings(api_keys=("svc-key",)))
    try:
        async with running_bridge(keyed.target) as port:
            async with realtime_socket(port, headers={"Authorization": "Bearer svc-key"}) as ws:
                assert (await ws.recv())["type"] == "session.created"
            async with realtime_socket(port, headers={"Authorization": "Bearer wrong"}) as ws:
                error = await ws.recv()
                assert error["error"]["code"] == "invalid_api_key", error
                assert (await ws.closed())[0] == 1008
    finally:
        await keyed.stop()


async def test_a_bad_resume_is_refused_with_the_services_code(bridge_port: int) -> None:
    async with realtime_socket(bridge_port, "") as ws:
        await ws.send({"type": "session.resume", "session_id": "nope", "resume_token": "x"})
        error = await ws.recv()
        assert error["error"]["code"] == "session_resume_expired"
        assert (await ws.closed())[0] == 1008


async def test_resume_after_the_first_message_is_refused(bridge_port: int) -> None:
    async with realtime_socket(bridge_port) as ws:
        await ws.recv()
        await ws.send({"type": "session.resume", "session_id": "s", "resume_token": "t"})
        assert (await ws.recv())["error"]["code"] == "unsupported_session_resume"


async def test_a_large_append_is_accepted(bridge_port: int) -> None:
    pcm = b"\x10\x00" * (24000 * 60)  # one minute: 3.8 MB of base64, over aiohttp's default
    async with realtime_socket(bridge_port) as ws:
        await ws.recv()
        await ws.send(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}
        )
        await ws.send({"type": "input_audio_buffer.commit"})
        committed = await ws.recv(wait_s=20)
        assert committed["type"] == "input_audio_buffer.committed"


async def test_big_engine_chunks_leave_as_small_deltas() -> None:
    service = await start_server(
        service_settings(engine_options={"pace": "fast", "chunk_ms": "5000"})
    )
    try:
        async with running_bridge(service.target) as port, realtime_socket(port) as ws:
            await ws.recv()
            await ws.send(
                {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(b"\x10\x00" * 24000 * 6).decode(),
                }
            )
            await ws.send({"type": "input_audio_buffer.commit", "create_response": True})
            events = await ws.until("response.done")
            deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
            sizes = [len(base64.b64decode(d["delta"])) for d in deltas]
            assert sum(sizes) == 24000 * 2 * 6 and max(sizes) <= 96_000 and len(deltas) >= 3
    finally:
        await service.stop()


@pytest.mark.parametrize("path", ["/v1/realtime?duplex=1&model=m", "/v1/duplex?model=m"])
async def test_duplex_paths(bridge_port: int, path: str) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"http://127.0.0.1:{bridge_port}{path}") as ws,
    ):
        message = await ws.receive(timeout=5)
        assert message.json()["type"] == "session.created"


async def test_health(bridge_port: int) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{bridge_port}/health") as response,
    ):
        assert response.status == 200 and (await response.json()) == {"status": "ok"}


async def test_an_unreachable_service_is_reported_and_the_socket_closes_1012() -> None:
    async with running_bridge("127.0.0.1:1") as port, realtime_socket(port) as ws:
        error = await ws.recv(wait_s=15)
        assert (error["error"]["code"], error["error"]["type"]) == (
            "service_unavailable",
            "server_error",
        )
        assert (await ws.closed())[0] == 1012
