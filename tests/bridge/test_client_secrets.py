"""Short-lived client secrets: minted by a backend with a bridge key, used once by a page.

Through a real bridge in front of a keyed service: the secret opens one websocket, as the key
that minted it (the service, which knows nothing of secrets, accepts the session); it is used
up, it expires, only a real key mints, and it never reaches a log.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any

import aiohttp
import pytest

import bridge.bodies
from bridge.client_secrets import ClientSecrets, Redeemed, TooManySecrets
from omni_grpc.wire.tenant_policy import CLIENT_SECRETS, TenantPolicy
from tests.bridge.testkit import WITH_EXTENSIONS, realtime_socket, running_bridge, service_settings
from tests.serving import serving

KEY = "backend-key"


async def mint(port: int, headers: dict[str, str], body: Any = None) -> aiohttp.ClientResponse:
    """POSTs to the minting endpoint; the response's body is read before it returns."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{port}/v1/realtime/client_secrets", headers=headers, json=body
        ) as response,
    ):
        await response.read()
        return response


async def upgrade_status(port: int, secret: str) -> int:
    """The status of an upgrade that presents ``secret`` the way a browser does."""
    protocols = ("realtime", f"openai-insecure-api-key.{secret}")
    try:
        async with realtime_socket(port, protocols=protocols):
            return 101
    except aiohttp.WSServerHandshakeError as refused:
        return refused.status


def test_a_secret_is_used_once_and_expires() -> None:
    now = [1000.0]
    minted = ClientSecrets(clock=lambda: now[0])
    value, expires_at = minted.mint("k", ttl_s=30)
    assert value.startswith("ek_") and expires_at == 1030.0
    assert minted.redeem("ek_" + "x" * 43) is None and minted.redeem("k") is None
    assert minted.redeem(value) == Redeemed("k")
    assert minted.redeem(value) is None  # used up
    late, _ = minted.mint("k", ttl_s=30)
    now[0] += 30
    assert minted.redeem(late) is None  # expired
    for ttl_s in (9.9, 7201.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            minted.mint("k", ttl_s=ttl_s)


def test_outstanding_secrets_are_bounded_per_key_and_expired_ones_make_room() -> None:
    now = [0.0]
    minted = ClientSecrets(
        clock=lambda: now[0], tenants=TenantPolicy(mints_per_s=1e9)
    )  # rate apart
    for _ in range(CLIENT_SECRETS):
        minted.mint("k", ttl_s=10)
    with pytest.raises(TooManySecrets) as refused:
        minted.mint("k", ttl_s=10)
    assert refused.value.code == "client_secrets_outstanding" and refused.value.retry_after_s > 0
    minted.mint("other", ttl_s=10)  # another key mints on
    now[0] += 10
    minted.mint("k", ttl_s=10)
    assert len(minted) == 1


def test_a_key_minting_too_fast_is_told_when_to_come_back() -> None:
    now = [0.0]
    minted = ClientSecrets(clock=lambda: now[0], tenants=TenantPolicy(mints_per_s=10.0))
    for _ in range(20):  # two seconds of the rate at once
        minted.mint("k")
    with pytest.raises(TooManySecrets) as refused:
        minted.mint("k")
    assert (refused.value.code, refused.value.retry_after_s) == ("rate_limit_exceeded", 0.1)
    minted.mint("other")
    now[0] += 0.1
    minted.mint("k")


async def test_a_page_opens_one_session_with_a_minted_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with (
        serving(service_settings(api_keys=(KEY,))) as service,
        running_bridge(service.target, api_keys=(KEY,)) as port,
    ):
        bearer = {"Authorization": f"Bearer {KEY}"}
        response = await mint(port, bearer, {"expires_after": {"seconds": 30}})
        assert response.status == 200 and response.headers["Cache-Control"] == "no-store"
        minted = await response.json()
        secret = minted["value"]
        assert secret.startswith("ek_") and abs(minted["expires_at"] - (time.time() + 30)) < 5
        # The page: the secret opens a session, which the service bound to the backend's key.
        protocols = ("realtime", f"openai-insecure-api-key.{secret}")
        # It resumes below, so it asks for the extensions (the resume token among them).
        async with realtime_socket(port, WITH_EXTENSIONS, protocols=protocols) as ws:
            created = await ws.recv()
            assert created["type"] == "session.created"
        assert await upgrade_status(port, secret) == 401  # used up
        # A resume takes a fresh secret of the same key, and finds the session.
        again = (await (await mint(port, bearer)).json())["value"]
        resume = ("realtime", f"openai-insecure-api-key.{again}")
        async with realtime_socket(port, "", protocols=resume) as ws:
            await ws.send(
                {
                    "type": "session.resume",
                    "session_id": created["session"]["id"],
                    "resume_token": created["resume_token"],
                }
            )
            assert (await ws.recv())["type"] == "session.resumed"
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert secret not in logged and again not in logged


async def test_only_a_real_key_mints_and_bad_requests_are_refused() -> None:
    async with (
        serving(service_settings(api_keys=(KEY,))) as service,
        running_bridge(service.target, api_keys=(KEY,)) as port,
    ):
        secret = (await (await mint(port, {"Authorization": f"Bearer {KEY}"})).json())["value"]
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": f"Bearer {secret}"},  # a secret mints no other secret
        ):
            assert (await mint(port, headers)).status == 401, headers
        assert (await mint(port, {"Origin": "https://evil.example"})).status == 403
        bearer = {"Authorization": f"bearer {KEY}"}
        for body in (
            {"expires_after": {"seconds": 5}},
            {"expires_after": {"seconds": 10**30}},
            {"expires_after": {"seconds": "x"}},
            {"expires_after": 60},
            [],
        ):
            assert (await mint(port, bearer, body)).status == 400, body
        assert (await mint(port, bearer, {})).status == 200
        assert await upgrade_status(port, "ek_made-up") == 401
    # Without keys there is nothing to stand for: no endpoint.
    async with serving(service_settings()) as service, running_bridge(service.target) as port:
        assert (await mint(port, {})).status == 404


async def test_a_body_that_comes_slowly_or_too_large_is_refused_and_its_socket_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bridge.bodies, "BODY_TIMEOUT_S", 0.5)
    async with (
        serving(service_settings(api_keys=(KEY,))) as service,
        running_bridge(service.target, api_keys=(KEY,)) as port,
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = (
            "POST /v1/realtime/client_secrets HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
            "Content-Length: 100\r\n\r\n{"
        )
        writer.write(head.encode())  # one byte of the hundred, and then nothing
        await writer.drain()
        started = time.monotonic()
        answer = await asyncio.wait_for(reader.read(), timeout=10.0)  # to the socket's close
        assert time.monotonic() - started < 5.0
        assert answer.startswith(b"HTTP/1.1 408 ") and b'"code":"request_timeout"' in answer
        writer.close()
        large = await mint(port, {"Authorization": f"Bearer {KEY}"}, {"pad": "x" * 70_000})
        assert large.status == 413
        assert (await large.json())["error"]["code"] == "request_too_large"
        assert (await mint(port, {"Authorization": f"Bearer {KEY}"}, {})).status == 200


async def test_a_key_reads_its_own_figures_and_no_other_keys() -> None:
    # /v1/omni/usage: what the caller's key was refused (here, a secret past its bound), under
    # its label; another key's figures are not in its answer, and a caller without a key of
    # the bridge gets none.
    # Keys of this test alone: the counters are the process's, and other tests count theirs.
    mine_key, other = f"usage-{secrets.token_hex(8)}", f"usage-{secrets.token_hex(8)}"
    async with (
        serving(service_settings()) as service,
        running_bridge(
            service.target, api_keys=(mine_key, other), max_client_secrets_per_key=1
        ) as port,
        aiohttp.ClientSession() as http,
    ):
        bearer = {"Authorization": f"Bearer {mine_key}"}
        assert (await mint(port, bearer)).status == 200
        assert (await mint(port, bearer)).status == 429  # one outstanding at the most
        usage = f"http://127.0.0.1:{port}/v1/omni/usage"
        async with http.get(usage, headers=bearer) as response:
            assert response.status == 200
            mine = await response.json()
        refusals = mine["counters"]["omni_grpc_bridge_key_refusals_total"]
        assert refusals == {"client_secrets_outstanding": 1.0}
        async with http.get(usage, headers={"Authorization": f"Bearer {other}"}) as response:
            theirs = await response.json()
        assert theirs["key_label"] != mine["key_label"]
        assert "omni_grpc_bridge_key_refusals_total" not in theirs["counters"]
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            async with http.get(usage, headers=headers) as response:
                assert response.status == 401
