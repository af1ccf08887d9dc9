"""Each key's share of a loop pass (bridge.loop_shares): once a key's commands have taken
their slice of a pass, its other sockets wait for the next pass and another key's go first;
nothing is refused or lost for it, only put off."""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp
import orjson
import pytest

from bridge.loop_shares import KeyShare, LoopShares
from bridge.options import BridgeOptions
from tests.bridge.testkit import running_bridge, service_settings
from tests.serving import serving

A, B = "key-a", "key-b"
SOCKETS = 4
COMMANDS = 60  # each socket's heartbeats, sent at once


async def test_a_key_that_used_its_slice_waits_for_the_next_pass_behind_another_key() -> None:
    shares = LoopShares(slice_s=0.001)
    order: list[str] = []

    async def command(name: str, share: KeyShare | None) -> None:
        assert share is not None
        await share.turn()
        order.append(name)
        share.spent(0.002)  # more than the slice

    # Ready in this order, in one pass: A's first command uses up A's slice, so A's second
    # waits for the next pass and B's, ready after it, goes first.
    await asyncio.gather(
        command("a1", shares.of(A)), command("a2", shares.of(A)), command("b", shares.of(B))
    )
    assert order == ["a1", "b", "a2"]


def test_the_empty_key_has_no_share() -> None:
    assert LoopShares().of("") is None


async def _heartbeats(http: aiohttp.ClientSession, port: int, key: str) -> list[str]:
    """A session of ``key`` that sends its heartbeats at once; the kinds of what came back."""
    ws = await http.ws_connect(
        f"http://127.0.0.1:{port}/v1/realtime?model=loopback-test&extensions=1",
        headers={"Authorization": f"Bearer {key}"},
    )
    async with ws:
        assert orjson.loads((await ws.receive()).data)["type"] == "session.created"
        for _ in range(COMMANDS):
            await ws.send_str('{"type":"session.heartbeat"}')
        kinds = []
        while kinds.count("session.heartbeat_ack") < COMMANDS and "error" not in kinds:
            kinds.append(orjson.loads((await asyncio.wait_for(ws.receive(), 30)).data)["type"])
        return kinds


async def test_a_key_held_to_its_share_has_every_command_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No slice at all: every command of a key waits while another of its sockets had the pass.
    derived = BridgeOptions.tenant_policy
    monkeypatch.setattr(
        BridgeOptions,
        "tenant_policy",
        lambda options: dataclasses.replace(derived(options), loop_slice_s=0.0),
    )
    async with (
        serving(service_settings(api_keys=(A, B))) as service,
        running_bridge(service, api_keys=(A, B)) as port,
        aiohttp.ClientSession() as http,
    ):
        sessions = [_heartbeats(http, port, A) for _ in range(SOCKETS)]
        answered = await asyncio.gather(*sessions, _heartbeats(http, port, B))
    for kinds in answered:
        assert "error" not in kinds
        assert kinds.count("session.heartbeat_ack") == COMMANDS
