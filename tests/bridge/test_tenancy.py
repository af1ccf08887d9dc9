"""Tenancy through the bridge: the key a websocket client presented travels on to the service,
so a session opened through the bridge is bound to it, and a resume with another key gets the
answer an unknown session gets."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from tests.bridge.testkit import WITH_EXTENSIONS, realtime_socket, running_bridge, service_settings
from tests.serving import serving

OWNER, OTHER = "owner-key", "other-key"


def as_key(key: str) -> dict[str, Any]:
    return {"headers": {"Authorization": f"Bearer {key}"}}


async def refused_resume(port: int, session_id: str, token: str, key: str) -> dict[str, Any]:
    """The error a resume through the bridge gets, without its per-event id, and the close."""
    async with realtime_socket(port, "", **as_key(key)) as ws:
        await ws.send({"type": "session.resume", "session_id": session_id, "resume_token": token})
        error = await ws.recv()
        assert error["type"] == "error", error
        code, _ = await ws.closed()
        return {**error["error"], "event_id": None, "close_code": code}


@pytest.mark.parametrize("service_keys", [(OWNER, OTHER), ()], ids=["keyed", "keyless"])
async def test_a_resume_with_another_key_is_refused_like_an_unknown_session(
    service_keys: tuple[str, ...],
) -> None:
    # Keyless: only the bridge checks keys, and still passes each client's own key on.
    async with (
        serving(service_settings(api_keys=service_keys)) as service,
        running_bridge(service.target, api_keys=(OWNER, OTHER)) as port,
        realtime_socket(port, WITH_EXTENSIONS, **as_key(OWNER)) as owner,
    ):
        created = await owner.recv()
        session_id, token = created["session"]["id"], created["resume_token"]
        unknown = await refused_resume(port, "sess_" + secrets.token_hex(16), token, OTHER)
        assert (unknown["code"], unknown["close_code"]) == ("session_resume_expired", 1008)
        assert await refused_resume(port, session_id, token, OTHER) == unknown
        await owner.send({"type": "session.heartbeat"})  # the owner did not notice a thing
        assert (await owner.recv())["type"] == "session.heartbeat_ack"
        async with realtime_socket(port, "", **as_key(OWNER)) as again:  # its own key: a takeover
            await again.send(
                {"type": "session.resume", "session_id": session_id, "resume_token": token}
            )
            assert (await again.recv())["type"] == "session.resumed"
            assert (await owner.recv())["type"] == "session.replaced"
