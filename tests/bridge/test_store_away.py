"""A resume through the bridge while the session store (Redis) is away.

The service refuses such a resume ``session_store_unavailable`` (retryable: the session may live
on in Redis, written by a peer); the relay tries again after the hint, as it does
``session_elsewhere``, instead of handing the client a refusal that would end its session. Here
the session is one no replica ever held, so once Redis answers, the client gets the service's
real answer, ``session_resume_expired``, and never the transient one; and when the tries run
out first, the client is told the last refusal, not closed without a word. Both ways a bridge
reaches the service are held to it: over gRPC, and in-process as under ``omni-grpc serve``.
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from bridge import relay
from omni_cli.cluster import free_port, redis_command
from omni_grpc.server.app import RunningServer
from omni_grpc.server.settings import ServerSettings
from tests.bridge.testkit import realtime_socket, running_bridge, service_settings
from tests.cluster.local import wait_for
from tests.serving import serving

# A session no replica ever held, so Redis (when it answers) has no record of it.
RESUME_AN_UNKNOWN_SESSION = {
    "type": "session.resume",
    "session_id": "sess_" + secrets.token_hex(16),
    "resume_token": secrets.token_urlsafe(32),
}


def _durable(redis_port: int) -> ServerSettings:
    """A durable replica whose Redis is to listen on ``redis_port`` (nothing there yet)."""
    return service_settings(
        durability="async", redis_url=f"redis://127.0.0.1:{redis_port}/0", route="r1"
    )


@pytest.mark.parametrize("hop", ["grpc", "in-process"])
async def test_a_resume_waits_out_the_store_and_gets_the_real_answer(
    hop: str, tmp_path: Path
) -> None:
    redis_port = free_port()
    async with serving(_durable(redis_port)) as running:
        target: str | RunningServer = running.target if hop == "grpc" else running
        async with running_bridge(target) as port, realtime_socket(port, "") as ws:
            await ws.send(RESUME_AN_UNKNOWN_SESSION)
            # Redis is away: the relay keeps trying, and the client hears nothing meanwhile.
            with pytest.raises(TimeoutError):
                await ws.recv(wait_s=2.0)
            redis = await asyncio.create_subprocess_exec(
                *redis_command(redis_port, tmp_path), stdout=asyncio.subprocess.DEVNULL
            )
            try:
                await wait_for(lambda: running.sessions.store.up, 30, "the store to come up")
                refused = await ws.recv(wait_s=30.0)
                assert refused["type"] == "error"
                assert refused["error"]["code"] == "session_resume_expired"
                assert (await ws.closed())[0] == 1008
            finally:
                redis.terminate()
                await redis.wait()


@pytest.mark.parametrize("hop", ["grpc", "in-process"])
async def test_when_the_tries_run_out_the_client_hears_the_refusal(
    hop: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay, "ELSEWHERE_ATTEMPTS", 2)
    async with serving(_durable(free_port())) as running:
        target: str | RunningServer = running.target if hop == "grpc" else running
        async with running_bridge(target) as port, realtime_socket(port, "") as ws:
            await ws.send(RESUME_AN_UNKNOWN_SESSION)
            refused = await ws.recv(wait_s=30.0)  # the first try and two more, 0.5 s apart
            assert refused["type"] == "error"
            assert refused["error"]["code"] == "session_store_unavailable"
            assert (await ws.closed())[0] == 1012  # UNAVAILABLE: come back (SERVICE_RESTART)
