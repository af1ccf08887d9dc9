"""GA's ``truncation`` in the vLLM-Omni dialect: read from the reference's flat
``session.update`` as from a nested one, and shown back on the session object in GA's shape."""

from __future__ import annotations

from tests.bridge.vllm_omni.test_endpoint import duplex_socket, recv, send

RATIO = {
    "type": "retention_ratio",
    "retention_ratio": 0.25,
    "token_limits": {"post_instructions": 300},
}


async def test_the_reference_dialect_sets_and_shows_a_truncation(bridge_port: int) -> None:
    async with duplex_socket(bridge_port) as ws:
        # The reference's flat form: the session's fields beside `type`.
        await send(ws, {"type": "session.update", "truncation": RATIO})
        created, updated = await recv(ws), await recv(ws)
        assert created["type"] == "session.created"
        assert created["session"]["truncation"] == RATIO
        assert updated["session"]["truncation"] == RATIO
        await send(ws, {"type": "session.update", "session": {"truncation": "disabled"}})
        assert (await recv(ws))["session"]["truncation"] == "disabled"
