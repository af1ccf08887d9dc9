"""How a session ends for a client, each as its own typed error."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf import duration_pb2

from omni_grpc.client import (
    ConnectionLost,
    DuplexClient,
    ResumeRefused,
    ResyncRequired,
    SessionClosed,
    SessionExpired,
    SessionReplaced,
)
from omni_grpc.core import Limits
from omni_grpc.server.app import RunningServer, start_server
from omni_grpc.wire import pb
from tests.client.conftest import (
    CONFIG,
    OPTIONS,
    collect_until,
    eventually,
    journal_length,
    kinds,
    settings,
    tone,
)
from tests.client.proxy import ChaosProxy


async def drain(client: DuplexClient) -> list[pb.ConverseResponse]:
    """Every event left, until events() ends or raises (the error propagates)."""
    events = []
    async with asyncio.timeout(10):
        async for event in client.events():
            events.append(event)
    return events


async def test_takeover_replaces_the_first_client(server: RunningServer) -> None:
    first = await DuplexClient.connect(server.target, config=CONFIG, options=OPTIONS)
    await first.append_audio(tone(100))
    await first.heartbeat()
    await collect_until(first, "heartbeat_ack")
    handle = first.resume_handle()
    assert handle.last_seq == 1 and "resume_token" not in repr(handle)

    second = await DuplexClient.resume(
        server.target, handle.session_id, handle.resume_token, handle.last_seq, options=OPTIONS
    )
    with pytest.raises(SessionReplaced) as replaced:
        await drain(first)
    assert replaced.value.session_id == handle.session_id
    with pytest.raises(SessionReplaced):
        await first.heartbeat()  # the first client is done for good
    # The new owner numbers on from what the server applied (two commands).
    assert second.applied_client_seq == 2 and second.generation == 2
    assert await second.commit(create_response=True) == 3
    events = await collect_until(second, "response_done")
    assert events[0].seq == 2 and events[0].input_committed.audio_duration_ms == 100.0
    await second.close()
    await first.close()


async def test_detach_hands_the_session_over_cleanly(server: RunningServer) -> None:
    first = await DuplexClient.connect(server.target, options=OPTIONS)
    await first.heartbeat()
    await collect_until(first, "heartbeat_ack")
    handle = await first.detach()
    with pytest.raises(SessionClosed) as closed:
        await drain(first)
    assert closed.value.reason == "detached"
    second = await DuplexClient.resume(
        server.target, handle.session_id, handle.resume_token, handle.last_seq, options=OPTIONS
    )
    await second.heartbeat()
    events = await collect_until(second, "heartbeat_ack")
    assert [e.seq for e in events] == [2]  # nothing replayed twice, nothing skipped
    await second.close()


async def test_resume_after_acknowledged_events_needs_a_resync(server: RunningServer) -> None:
    client = await DuplexClient.connect(server.target, options=OPTIONS, ack_interval_s=0.05)
    for _ in range(3):
        await client.heartbeat()
    events: list[pb.ConverseResponse] = []
    for _ in range(3):
        events = await collect_until(client, "heartbeat_ack", into=events)
    # The acks landed: the server forgot events 1..3.
    await eventually(lambda: journal_length(server, client.session_id) == 0)
    handle = await client.detach()
    with pytest.raises(ResyncRequired) as resync:
        await DuplexClient.resume(
            server.target, handle.session_id, handle.resume_token, 0, options=OPTIONS
        )
    assert resync.value.reason == pb.RESYNC_REASON_JOURNAL_GAP


async def test_journal_overflow_turns_the_next_cut_into_resync() -> None:
    running = await start_server(settings(limits=Limits(journal_max_bytes=4096)))
    try:
        async with ChaosProxy("127.0.0.1", running.grpc_port, seed=3) as proxy:
            client = await DuplexClient.connect(proxy.target, config=CONFIG, options=OPTIONS)
            for _ in range(5):
                await client.append_audio(tone(100))
            await client.commit(create_response=True)
            events = await collect_until(client, "response_done")
            assert "resync_required" in kinds(events)  # delivered; the stream went on
            proxy.cut_all()
            with pytest.raises(ResyncRequired) as resync:
                await drain(client)
            assert resync.value.reason == pb.RESYNC_REASON_JOURNAL_OVERFLOW
            await client.close()
    finally:
        await running.stop()


async def test_idle_session_expires_with_its_event(server: RunningServer) -> None:
    config = pb.SessionConfig(idle_timeout=duration_pb2.Duration(nanos=300_000_000))
    client = await DuplexClient.connect(server.target, config=config, options=OPTIONS)
    events: list[pb.ConverseResponse] = []
    with pytest.raises(SessionExpired) as expired:
        async with asyncio.timeout(10):
            async for event in client.events():
                events.append(event)
    assert kinds(events) == ["session_expired"]  # the event first, then the error
    assert expired.value.reason == pb.EXPIRY_REASON_IDLE_TIMEOUT
    assert expired.value.event == events[0]
    with pytest.raises(SessionExpired):
        await client.heartbeat()
    await client.close()


async def test_outage_past_the_grace_is_connection_lost_then_expired() -> None:
    running = await start_server(settings(limits=Limits(disconnect_grace_s=0.3)))
    try:
        async with ChaosProxy("127.0.0.1", running.grpc_port, seed=4) as proxy:
            client = await DuplexClient.connect(proxy.target, options=OPTIONS)
            handle = client.resume_handle()
            proxy.refuse = True
            proxy.cut_all()
            with pytest.raises(ConnectionLost) as lost:
                await drain(client)
            assert lost.value.attempts >= 2  # it retried within the grace, then gave up
            await client.close()
            await eventually(lambda: len(running.registry) == 0)  # the server expired it
            # For one more grace the ended session still answers a resume with its ending.
            late = await DuplexClient.resume(
                running.target, handle.session_id, handle.resume_token, options=OPTIONS
            )
            with pytest.raises(SessionExpired) as expired:
                await drain(late)
            assert expired.value.reason == pb.EXPIRY_REASON_DISCONNECT_GRACE
            await late.close()
            await asyncio.sleep(1.2)  # then it is gone for good
            with pytest.raises(ResumeRefused) as refused:
                await DuplexClient.resume(
                    running.target, handle.session_id, handle.resume_token, options=OPTIONS
                )
            assert refused.value.status == grpc.StatusCode.NOT_FOUND
            assert refused.value.code == "session_resume_expired"
    finally:
        await running.stop()


async def test_wrong_token_is_refused_without_retrying(server: RunningServer) -> None:
    client = await DuplexClient.connect(server.target, options=OPTIONS)
    with pytest.raises(ResumeRefused) as refused:
        await DuplexClient.resume(
            server.target, client.session_id, "not-the-token", options=OPTIONS
        )
    # The answer an unknown session gets: a refusal tells nothing about which ids exist.
    assert (refused.value.status, refused.value.code) == (
        grpc.StatusCode.NOT_FOUND,
        "session_resume_expired",
    )
    assert "not-the-token" not in str(refused.value)
    await client.heartbeat()  # the real owner is unaffected
    assert kinds(await collect_until(client, "heartbeat_ack")) == ["heartbeat_ack"]
    await client.close()


async def _close_with_answer_lost(
    client: DuplexClient, server: RunningServer, proxy: ChaosProxy, *, wait_s: float = 0.0
) -> None:
    proxy.stall("down")  # the close reaches the server; its answer is held back ...
    closing = asyncio.create_task(client.close())
    await eventually(lambda: len(server.registry) == 0)
    await asyncio.sleep(wait_s)
    proxy.cut_all()  # ... and lost with the connection
    proxy.unstall()
    async with asyncio.timeout(5):
        await closing


async def test_close_whose_answer_was_lost_is_replayed(
    server: RunningServer, proxy: ChaosProxy
) -> None:
    client = await DuplexClient.connect(proxy.target, options=OPTIONS)
    await _close_with_answer_lost(client, server, proxy)
    # The resume found the ended session and replayed its last event; then a quiet end.
    assert kinds(await drain(client)) == ["session_closed"]
    assert client.stats.reconnects == 1


async def test_close_after_the_session_is_gone_ends_quietly() -> None:
    running = await start_server(settings(limits=Limits(disconnect_grace_s=0.3)))
    try:
        async with ChaosProxy("127.0.0.1", running.grpc_port, seed=5) as proxy:
            client = await DuplexClient.connect(proxy.target, options=OPTIONS)
            # Past the grace the server forgot the session: the resume is refused with
            # NOT_FOUND, which for a client that asked to close is the answer it wanted.
            await _close_with_answer_lost(client, running, proxy, wait_s=0.5)
            assert await drain(client) == []
            assert client.stats.reconnects == 1
    finally:
        await running.stop()


async def test_close_lost_on_the_way_is_resent(server: RunningServer, proxy: ChaosProxy) -> None:
    client = await DuplexClient.connect(proxy.target, options=OPTIONS)
    proxy.cut_after_bytes(0, direction="up")  # the close itself is cut off
    events: list[pb.ConverseResponse] = []
    consumer = asyncio.create_task(drain(client))
    async with asyncio.timeout(5):
        await client.close()
    events = await consumer
    assert kinds(events) == ["session_closed"]  # came on the resumed stream
    assert client.stats.last_resent == (1,)
    assert len(server.registry) == 0
