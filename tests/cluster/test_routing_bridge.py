"""The browser page's resume flow through the cluster: websockets to the bridge behind HAProxy,
the bridge to the replicas through HAProxy, with no routing key on the page's side.

A resume the bridge sends lands on any replica; one that does not hold the session sends it on
to the owner (``session_elsewhere`` with the owner's key), and the bridge follows. When the owner
is gone, the replica it lands on adopts the session.
"""

from __future__ import annotations

import signal
from typing import Any

import aiohttp
import pytest

from tests.cluster.local import LocalCluster, wait_for

EXTENSIONS = "/v1/realtime?extensions=1"
TIMEOUT_S = 60


@pytest.fixture
def cluster(three_replicas: LocalCluster) -> LocalCluster:
    return three_replicas


class Page:
    """What the browser page keeps across its websockets: the session, token and cursor."""

    def __init__(self) -> None:
        self.session_id, self.token, self.seen = "", "", 0

    async def next(self, ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
        """The next event, through the page's bookkeeping (its token and cursor)."""
        event: dict[str, Any] = await ws.receive_json(timeout=TIMEOUT_S)
        assert event["type"] != "error", event
        self.seen = max(self.seen, event.get("server_event_seq") or 0)
        if event["type"] in ("session.created", "session.resumed"):
            self.token = event["resume_token"]
            self.session_id = event["session"]["id"]
        return event

    async def until(self, ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
        while (event := await self.next(ws))["type"] != kind:
            pass
        return event

    async def say(self, ws: aiohttp.ClientWebSocketResponse, text: str) -> dict[str, Any]:
        content = [{"type": "input_text", "text": text}]
        item = {"type": "message", "role": "user", "content": content}
        await ws.send_json({"type": "conversation.item.create", "item": item})
        await ws.send_json({"type": "response.create"})
        return await self.until(ws, "response.done")

    async def resume(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        resume = {"type": "session.resume", "session_id": self.session_id}
        resume |= {"resume_token": self.token, "last_received_server_event_seq": self.seen}
        await ws.send_json(resume)
        await self.until(ws, "session.resumed")


def _words(done: dict[str, Any]) -> str:
    parts = [part for item in done["response"]["output"] for part in item.get("content", [])]
    return " ".join(str(part.get("transcript") or part.get("text") or "") for part in parts)


async def test_the_page_resumes_through_any_bridge_and_replica(cluster: LocalCluster) -> None:
    base = f"http://{cluster.state['proxy']['http']}"
    page = Page()
    routes = [r["route"] for r in cluster.state["replicas"]]
    opened = {r: cluster.metric(r, "omni_grpc_sessions_opened_total") for r in routes}
    adopted = sum(cluster.metric(r, "omni_sessions_adopted_total") for r in routes)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(base + EXTENSIONS) as ws:
            await ws.send_json({"type": "session.update", "session": {"type": "realtime"}})
            await page.until(ws, "session.created")
            await page.say(ws, "first words")
        for round_ in range(3):  # owner alive: wherever the resume lands, it finds the owner
            async with http.ws_connect(base + EXTENSIONS + "&resume=1") as ws:
                await page.resume(ws)
                done = await page.say(ws, f"round {round_}")
                assert "first words" in _words(done), done
        assert sum(cluster.metric(r, "omni_sessions_adopted_total") for r in routes) == adopted
        # The owner dies: the next resume, the same from the page's side, is adopted.
        owners = [
            r for r in routes if cluster.metric(r, "omni_grpc_sessions_opened_total") > opened[r]
        ]
        assert len(owners) == 1
        cluster.kill(owners[0], signal.SIGKILL)
        await wait_for(lambda: not cluster.alive(owners[0]), 30, "the owner to die")
        async with http.ws_connect(base + EXTENSIONS + "&resume=1") as ws:
            await page.resume(ws)
            done = await page.say(ws, "after the move")
            assert "first words" in _words(done) and "round 2" in _words(done), done
