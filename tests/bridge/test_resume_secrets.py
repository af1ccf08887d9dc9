"""Resume secrets: how a page opened with a one-use client secret comes back after a drop.

The signed secret by itself (issue, read back, tampered, expired, another bridge's keys), then
through a real bridge in front of a keyed service: a socket a client secret opened is given a
resume secret with its session; it resumes that session (and is given a fresh one), and
nothing else: it opens no new session and resumes no other.
"""

from __future__ import annotations

import aiohttp
import pytest

from bridge.resume_secrets import TTL_S, ResumeSecrets
from tests.bridge.test_client_secrets import KEY, mint
from tests.bridge.testkit import WITH_EXTENSIONS, realtime_socket, running_bridge, service_settings
from tests.serving import serving

SESSION = "sess_0123456789abcdef0123456789abcdef"


def test_a_resume_secret_stands_for_its_key_and_its_session_until_it_expires() -> None:
    secrets = ResumeSecrets(("key-a", "key-b"))
    issued = secrets.issue("key-b", SESSION, now=1000.0)
    assert issued.startswith("rs_") and "key-b" not in issued
    assert secrets.redeem(issued, now=1000.0 + TTL_S - 1) == ("key-b", SESSION)
    assert secrets.redeem(issued, now=1000.0 + TTL_S) is None  # expired
    # Any bridge with the same keys reads it (workers, bridges behind a proxy); others do not.
    assert ResumeSecrets(("key-b", "key-a")).redeem(issued, now=1000.0) == ("key-b", SESSION)
    assert ResumeSecrets(("key-a", "key-c")).redeem(issued, now=1000.0) is None
    tampered = issued[:-3] + ("A" if issued[-3] != "A" else "B") + issued[-2:]
    for bad in (tampered, "rs_", "rs_!!!", issued.replace("rs_", "ek_"), "rs_" + "A" * 300):
        assert secrets.redeem(bad, now=1000.0) is None, bad


async def test_a_page_with_a_client_secret_resumes_with_its_resume_secret_only() -> None:
    async with (
        serving(service_settings(api_keys=(KEY,))) as service,
        running_bridge(service.target, api_keys=(KEY,)) as port,
    ):
        secret = (await (await mint(port, {"Authorization": f"Bearer {KEY}"})).json())["value"]
        protocols = ("realtime", f"openai-insecure-api-key.{secret}")
        async with realtime_socket(port, WITH_EXTENSIONS, protocols=protocols) as ws:
            created = await ws.recv()
        assert created["type"] == "session.created" and created["resume_secret"].startswith("rs_")
        session_id, token = created["session"]["id"], created["resume_token"]
        again = ("realtime", f"openai-insecure-api-key.{created['resume_secret']}")
        resume = {"type": "session.resume", "session_id": session_id, "resume_token": token}
        async with realtime_socket(port, WITH_EXTENSIONS, protocols=again) as ws:
            await ws.send(resume)
            resumed = await ws.recv()
        assert resumed["type"] == "session.resumed"
        assert resumed["resume_secret"].startswith("rs_")  # a fresh one for the next drop
        # It opens no new session, and resumes no other.
        opening = {"type": "session.update", "session": {"type": "realtime"}}
        other = {**resume, "session_id": "sess_" + "f" * 32}
        for first in (opening, other):
            async with realtime_socket(port, WITH_EXTENSIONS, protocols=again) as ws:
                await ws.send(first)
                refused = await ws.recv()
                assert refused["type"] == "error"
                assert refused["error"]["code"] == "invalid_api_key"
                closed = await ws.ws.receive()
                assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == 1008
        # A socket a real key opened needs none, and gets none.
        bearer = ("realtime", f"openai-insecure-api-key.{KEY}")
        async with realtime_socket(port, WITH_EXTENSIONS, protocols=bearer) as ws:
            assert "resume_secret" not in await ws.recv()


async def test_a_made_up_resume_secret_is_refused_before_the_upgrade() -> None:
    async with (
        serving(service_settings(api_keys=(KEY,))) as service,
        running_bridge(service.target, api_keys=(KEY,)) as port,
    ):
        made_up = ResumeSecrets(("not-the-bridges-key",)).issue("x", SESSION, now=0.0)
        protocols = ("realtime", f"openai-insecure-api-key.{made_up}")
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            async with realtime_socket(port, WITH_EXTENSIONS, protocols=protocols):
                pass
        assert refused.value.status == 401
