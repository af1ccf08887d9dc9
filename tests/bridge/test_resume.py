"""Resume and takeover through the bridge, with the bridge itself replaced in between."""

from __future__ import annotations

import asyncio
import base64
import itertools
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import orjson
import pytest

from bridge.app import start_bridge
from bridge.options import BridgeOptions
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import RunningServer, start_server
from omni_grpc.wire import pb
from omni_grpc.wire.keys import resume_token_metadata
from tests.bridge.testkit import (
    WITH_EXTENSIONS,
    RealtimeSocket,
    check_server_event,
    realtime_socket,
    running_bridge,
    service_settings,
)


@pytest.fixture
async def paced_service() -> AsyncIterator[RunningServer]:
    """A loopback that answers at twice real time, so a response is still running at a cut."""
    running = await start_server(
        service_settings(engine_options={"pace": "realtime", "speed": "2"})
    )
    yield running
    await running.stop()


def append(pcm: bytes) -> dict[str, Any]:
    return {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}


def last_seq(events: list[dict[str, Any]]) -> int:
    return max((e["server_event_seq"] for e in events if "server_event_seq" in e), default=0)


async def wait_for_journal(service: RunningServer, created: dict[str, Any], seq: int) -> None:
    """Polls GetSession, as any client may, until the session has journaled ``seq``."""
    request = pb.GetSessionRequest(session_id=created["session"]["id"])
    metadata = resume_token_metadata(created["resume_token"])
    async with grpc.aio.insecure_channel(service.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        for _ in range(250):
            if (await stub.GetSession(request, metadata=metadata)).last_seq >= seq:
                return
            await asyncio.sleep(0.02)
    raise AssertionError(f"the session never journaled event {seq}")


async def start_turn(ws: RealtimeSocket, speech: bytes) -> None:
    await ws.send(append(speech))
    await ws.send({"type": "input_audio_buffer.commit", "create_response": True})


async def test_resume_through_a_fresh_bridge_misses_nothing_and_repeats_nothing(
    paced_service: RunningServer, speech: bytes
) -> None:
    runner, first_port = await start_bridge(paced_service.target, BridgeOptions(port=0))
    async with realtime_socket(first_port, WITH_EXTENSIONS) as ws:
        created = await ws.recv()
        await start_turn(ws, speech)
        while sum(e["type"] == "response.output_audio.delta" for e in ws.received) < 3:
            await ws.recv()
        # The bridge goes away mid-response with the socket open; what arrives before the
        # close counts as received.
        stopping = asyncio.create_task(runner.cleanup())
        while not ws.ws.closed and (message := await ws.ws.receive(timeout=5)).type is (
            aiohttp.WSMsgType.TEXT
        ):
            event = orjson.loads(message.data)
            check_server_event(event)
            ws.received.append(event)
        await stopping
        assert ws.ws.close_code == 1001
    before = list(ws.received)
    assert "response.done" not in [e["type"] for e in before]
    # The session, detached, goes on producing; wait until there is something to replay.
    await wait_for_journal(paced_service, created, last_seq(before) + 4)

    async with (
        running_bridge(paced_service.target) as second_port,
        realtime_socket(second_port, "") as ws,
    ):
        await ws.send(
            {
                "type": "session.resume",
                "session_id": created["session"]["id"],
                "resume_token": created["resume_token"],
                "last_received_server_event_seq": last_seq(before),
            }
        )
        resumed = await ws.recv()
        assert resumed["type"] == "session.resumed"
        assert resumed["attachment_generation"] == 2
        assert resumed["resume_token"] != created["resume_token"]
        after = await ws.until("response.done")
        # A second turn on the new connection: its commands are numbered after the old ones.
        await start_turn(ws, speech[:24000])
        second_turn = await ws.until("response.done")

    seen = {e["event_id"]: e for e in before}
    # A partly received group comes again whole, with the same ids and the same content.
    repeated = [e for e in after if e["event_id"] in seen]
    assert all(seen[e["event_id"]] == e for e in repeated)
    events = before + [e for e in after if e["event_id"] not in seen]
    assert "error" not in [e["type"] for e in events + second_turn]
    ids = [e["event_id"] for e in events]
    assert len(ids) == len(set(ids))
    seqs = [e["server_event_seq"] for e in events if "server_event_seq" in e]
    assert seqs == list(range(1, len(seqs) + 1))
    assert resumed["replayed_events"] >= 1
    # The audio is continuous across the cut: every delta starts where the last one ended.
    deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
    for previous, current in itertools.pairwise(deltas):
        assert current["start_ms"] == pytest.approx(previous["start_ms"] + previous["duration_ms"])
    reply = b"".join(base64.b64decode(d["delta"]) for d in deltas)
    assert abs(len(reply) / 48 - len(speech) / 48) < 30
    transcript = "".join(
        e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta"
    )
    done = next(e for e in events if e["type"] == "response.output_audio_transcript.done")
    assert transcript == done["transcript"]
    assert events[-1]["response"]["status"] == "completed"


async def test_takeover_replaces_the_first_connection(bridge_port: int) -> None:
    async with realtime_socket(bridge_port, WITH_EXTENSIONS) as first:
        created = await first.recv()
        async with realtime_socket(bridge_port, "") as second:
            await second.send(
                {
                    "type": "session.resume",
                    "session_id": created["session"]["id"],
                    "resume_token": created["resume_token"],
                    "last_received_server_event_seq": 0,
                }
            )
            replaced = await first.recv()
            assert replaced["type"] == "session.replaced"
            assert replaced["attachment_generation"] == 1
            assert await first.closed() == (1000, "session_replaced")
            assert (await second.recv())["type"] == "session.resumed"
            await second.send({"type": "session.heartbeat"})
            assert (await second.recv())["type"] == "session.heartbeat_ack"


async def test_a_stale_token_cannot_resume(bridge_port: int) -> None:
    async with realtime_socket(bridge_port, WITH_EXTENSIONS) as first:
        created = await first.recv()
        resume = {
            "type": "session.resume",
            "session_id": created["session"]["id"],
            "resume_token": created["resume_token"],
        }
        async with realtime_socket(bridge_port, "") as second:
            await second.send(resume)
            assert (await second.recv())["type"] == "session.resumed"
            async with realtime_socket(bridge_port, "") as third:
                await third.send(resume)  # the token rotated on the first resume
                # The answer an unknown session gets: nothing tells which ids exist.
                assert (await third.recv())["error"]["code"] == "session_resume_expired"
                assert (await third.closed())[0] == 1008


async def test_a_resume_past_acknowledged_events_must_resync(bridge_port: int) -> None:
    async with realtime_socket(bridge_port, WITH_EXTENSIONS) as first:
        created = await first.recv()
        for _ in range(2):  # two journaled refusals: events 1 and 2
            await first.send({"type": "input_audio_buffer.commit"})
            await first.recv()
        await first.send({"type": "session.event_ack", "server_event_seq": 2})
        await first.send({"type": "session.heartbeat"})
        assert (await first.recv())["server_event_seq"] == 3  # the ack was applied before it
    async with realtime_socket(bridge_port, "resume=1") as second:
        await second.send(
            {
                "type": "session.resume",
                "session_id": created["session"]["id"],
                "resume_token": created["resume_token"],
                "last_received_server_event_seq": 1,  # event 2 was acknowledged and is gone
            }
        )
        resync = await second.recv()
        assert (resync["type"], resync["reason"]) == ("session.resync_required", "journal_gap")
        assert await second.closed() == (1000, "resync_required")


async def test_a_draining_service_says_going_away(service: RunningServer, bridge_port: int) -> None:
    async with realtime_socket(bridge_port, WITH_EXTENSIONS) as ws:
        await ws.recv()
        drain = asyncio.create_task(service.drain(0.5))
        going = await ws.recv()
        assert going["type"] == "session.going_away"
        assert going["reason"] == "shutdown" and 0 < going["time_left_ms"] <= 500
        await drain
