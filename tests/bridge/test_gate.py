"""The bridge's gate, through a real bridge and service: Host, Origin and key, before the upgrade.

A web page the user visits must not reach a local bridge: a foreign ``Origin``, ``Origin:
null`` and a DNS-rebinding ``Host`` are refused with 403 before any session opens; a bad key
with 401; clients that send no Origin (SDKs, servers) pass. Every response carries the security
headers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from bridge.gate import CONTENT_SECURITY_POLICY, DEFAULT_ALLOWED_ORIGINS
from omni_cli import build_parser, resolve_bridge_settings, resolve_serve_settings
from omni_cli.launch import start_service
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_credentials
from tests.bridge.testkit import realtime_socket, running_bridge, service_settings
from tests.serving import serving


async def upgrade(port: int, headers: dict[str, str], **options: Any) -> tuple[int, str, Any]:
    """Tries a websocket upgrade; returns the status, the body and the response's headers."""
    url = f"http://127.0.0.1:{port}/v1/realtime?model=loopback-test"
    async with aiohttp.ClientSession() as http:
        try:
            async with http.ws_connect(url, headers=headers, **options) as ws:
                event = await ws.receive_json(timeout=5)
                return 101, event["type"], None
        except aiohttp.WSServerHandshakeError as refused:
            return refused.status, refused.message, refused.headers


async def refusal_body(port: int, headers: dict[str, str]) -> tuple[int, str]:
    """The plain HTTP answer to an upgrade request (the reason the client library hides)."""
    upgrade_headers = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        **headers,
    }
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/v1/realtime", headers=upgrade_headers) as response,
    ):
        return response.status, (await response.text()).strip()


async def test_foreign_pages_and_rebinding_hosts_are_refused_before_the_upgrade(
    service: RunningServer,
) -> None:
    async with running_bridge(service.target) as port:
        for headers, reason in (
            ({"Origin": "https://evil.example"}, "origin_not_allowed"),
            ({"Origin": "null"}, "origin_not_allowed"),
            ({"Origin": "http://localhost.evil.example"}, "origin_not_allowed"),
            ({"Host": f"evil.example:{port}"}, "host_not_allowed"),
            # The rebinding page itself: same origin as the Host it sends, under its own name.
            (
                {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"},
                "host_not_allowed",
            ),
        ):
            status, _, _ = await upgrade(port, headers)
            assert status == 403, headers
            assert await refusal_body(port, headers) == (403, reason), headers
        # The rebinding page cannot read the page or its files either; health stays open.
        async with aiohttp.ClientSession() as http:
            for path, status in (("/", 403), ("/static/app.js", 403), ("/health", 200)):
                rebound = {"Host": f"evil.example:{port}"}
                async with http.get(f"http://127.0.0.1:{port}{path}", headers=rebound) as response:
                    assert response.status == status, path
    assert len(service.registry) == 0, "a refused page opened a session"


async def test_local_pages_the_bridges_own_origin_and_clients_without_origin_pass(
    service: RunningServer,
) -> None:
    async with running_bridge(service.target) as port:
        for headers in (
            {},  # an SDK or a server: no Origin
            {"Origin": f"http://127.0.0.1:{port}"},  # the bridge's own page
            {"Origin": "http://localhost:5173", "Host": f"localhost:{port}"},  # a local dev page
            {"Origin": "https://[::1]:8443"},
            {"Host": f"[::1]:{port}"},
            {"Host": f"192.0.2.7:{port}"},  # an address cannot be rebound
        ):
            assert (await upgrade(port, headers))[:2] == (101, "session.created"), headers


async def test_configured_origins_and_hosts_replace_the_local_default(
    service: RunningServer,
) -> None:
    app = {"Origin": "https://app.example", "Host": "bridge.example"}
    async with running_bridge(
        service.target,
        allowed_origins=("https://app.example", "http://dev.example:*"),
        allowed_hosts=("bridge.example",),
    ) as port:
        assert (await upgrade(port, app))[:2] == (101, "session.created")
        for origin in ("http://dev.example:3000", "http://dev.example"):
            assert (await upgrade(port, {"Origin": origin}))[0] == 101, origin
        for origin in ("http://app.example", "https://app.example:8443", "http://localhost:3000"):
            assert (await upgrade(port, {"Origin": origin}))[0] == 403, origin
    async with running_bridge(service.target, allowed_origins=("*",), allowed_hosts=("*",)) as port:
        for headers in (
            {"Origin": "https://evil.example"},
            {"Origin": "null"},
            {"Host": "anything.example"},
        ):
            assert (await upgrade(port, headers))[0] == 101, headers


async def test_a_bad_key_is_refused_with_401_before_the_upgrade(service: RunningServer) -> None:
    async with running_bridge(service.target, api_keys=("k1",)) as port:
        for headers in ({}, {"Authorization": "Bearer k2"}, {"Authorization": "Basic k1"}):
            status, _, response_headers = await upgrade(port, headers)
            assert status == 401, headers
            assert response_headers["WWW-Authenticate"].startswith("Bearer")
            assert await refusal_body(port, headers) == (401, "invalid_api_key")
        # The scheme is case-insensitive (RFC 7235), and spaces around the key are not the key.
        for value in ("bearer k1", "BEARER  k1", "Bearer k1 "):
            assert (await upgrade(port, {"Authorization": value}))[0] == 101, value
        browser = ("realtime", "openai-insecure-api-key.k1")
        assert (await upgrade(port, {}, protocols=browser))[0] == 101
        # A foreign page is refused for what it is, whatever key it holds.
        evil = {"Origin": "https://evil.example", "Authorization": "Bearer k1"}
        assert await refusal_body(port, evil) == (403, "origin_not_allowed")


async def test_a_keyed_service_takes_the_bearer_scheme_in_any_case() -> None:
    assert bearer_credentials("bEaReR  secret ") == "secret"
    assert bearer_credentials("Basic secret") == bearer_credentials("Bearersecret") == ""
    async with (
        serving(service_settings(api_keys=("secret",))) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        request = pb.GetSessionRequest(session_id="nope")
        for scheme in ("bearer", "BEARER", "Bearer"):
            metadata = (("authorization", f"{scheme} secret"),)
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stub.GetSession(request, metadata=metadata)
            # Past the key check: the unknown session is what is refused.
            assert failed.value.code() is not grpc.StatusCode.UNAUTHENTICATED, scheme
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.GetSession(request, metadata=(("authorization", "bearer wrong"),))
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_every_response_carries_the_security_headers(bridge_port: int) -> None:
    async with aiohttp.ClientSession() as http:
        for path in ("/", "/static/app.js", "/static/worklet.js", "/static/page.css", "/health"):
            async with http.get(f"http://127.0.0.1:{bridge_port}{path}") as response:
                assert response.status == 200, path
                assert response.headers["X-Content-Type-Options"] == "nosniff", path
                assert response.headers["X-Frame-Options"] == "DENY", path
                assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        status, _, headers = await upgrade(bridge_port, {"Origin": "null"})
        assert status == 403 and headers["X-Frame-Options"] == "DENY"
    async with realtime_socket(bridge_port) as ws:
        assert (await ws.recv())["type"] == "session.created"


async def test_the_flags_reach_the_bridge_that_serve_starts(tmp_path: Path) -> None:
    config = tmp_path / "omni.toml"
    config.write_text('allowed_hosts = ["bridge.example"]\n')
    flags = ["--engine", "loopback", "--grpc-port", "0", "--config"]
    args = build_parser().parse_args(
        ["serve", *flags, str(config), "--allowed-origin", "https://app.example"]
    )
    settings = resolve_serve_settings(args, {})
    assert settings.bridge.allowed_origins == ("https://app.example",)
    assert settings.bridge.allowed_hosts == ("bridge.example",)
    env = {"OMNI_GRPC_ALLOWED_ORIGINS": "https://a.example, https://b.example"}
    from_env = resolve_serve_settings(build_parser().parse_args(["serve"]), env)
    assert from_env.bridge.allowed_origins == ("https://a.example", "https://b.example")
    assert resolve_serve_settings(
        build_parser().parse_args(["serve"]), {}
    ).bridge.allowed_origins == (DEFAULT_ALLOWED_ORIGINS)
    bridge_args = ["bridge", "--grpc-target", "h:1", "--allowed-origin", "*", "--allowed-host", "*"]
    alone = resolve_bridge_settings(build_parser().parse_args(bridge_args), {})
    assert (alone.bridge.allowed_origins, alone.bridge.allowed_hosts) == (("*",), ("*",))
    service = await start_service(dataclasses.replace(settings, http_port=0))  # 0: any port
    try:
        assert service.http_port is not None
        app = {"Origin": "https://app.example", "Host": "bridge.example"}
        assert (await upgrade(service.http_port, app))[:2] == (101, "session.created")
        local = {"Origin": "http://localhost:3000"}
        assert (await upgrade(service.http_port, local))[0] == 403
    finally:
        await service.stop()
