"""Reconnects through a proxy that cuts: the event stream stays exact, commands apply once."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from omni_grpc.client import DuplexClient
from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from tests.client.conftest import (
    CONFIG,
    OPTIONS,
    assert_contiguous,
    collect_until,
    eventually,
    journal_length,
    kinds,
    tone,
)
from tests.client.proxy import ChaosProxy

CHUNK_MS = 20


async def test_cut_during_a_response_loses_and_repeats_nothing(
    server: RunningServer, proxy: ChaosProxy
) -> None:
    client = await DuplexClient.connect(proxy.target, config=CONFIG, options=OPTIONS)
    for _ in range(10):
        await client.append_audio(tone(100))
    # The cut lands inside the answer: after its first 20 kB on the way down (its audio alone
    # is 48 kB). Cutting once its first audio was read raced the server: at fast pace the
    # whole answer could be through the proxy by then, and read to its end before the client
    # noticed the cut.
    proxy.cut_after_bytes(20_000, direction="down")
    await client.commit(create_response=True)
    events = await collect_until(client, "response_done")
    assert proxy.stats.cuts == 1
    assert_contiguous(events)
    assert client.stats.reconnects == 1 and client.generation == 2
    audio = sum(
        len(e.output_audio_delta.audio)
        for e in events
        if e.WhichOneof("event") == "output_audio_delta"
    )
    assert audio == 1000 * 24 * 2  # every chunk once: none lost, none doubled
    assert kinds(events).count("response_done") == 1
    await client.close()


async def test_resend_is_exactly_the_unapplied_commands(
    server: RunningServer, proxy: ChaosProxy
) -> None:
    client = await DuplexClient.connect(proxy.target, config=CONFIG, options=OPTIONS)
    # Cut in the middle of a burst of appends: whatever was in flight never arrived.
    proxy.cut_after_bytes(20_000)
    chunks = 100
    for _ in range(chunks):
        await client.append_audio(tone(CHUNK_MS))
    commit_seq = await client.commit(create_response=True)
    events = await collect_until(client, "response_done")
    stats = client.stats
    assert stats.reconnects == 1 and stats.resent_commands >= 1
    # The resend started right above what the server had applied and ran to the newest
    # command numbered by then, with no gap.
    first = stats.resumed_applied + 1
    assert stats.last_resent == tuple(range(first, first + len(stats.last_resent)))
    # The server applied each command exactly once: all the audio, nothing twice.
    committed = next(e for e in events if e.WhichOneof("event") == "input_committed")
    assert committed.input_committed.audio_duration_ms == chunks * CHUNK_MS
    assert events[-1].applied_client_seq == commit_seq == chunks + 1
    assert "error" not in kinds(events)
    assert_contiguous(events)
    await client.close()


async def test_commands_sent_while_disconnected_go_out_after_the_resume(
    server: RunningServer, proxy: ChaosProxy
) -> None:
    client = await DuplexClient.connect(proxy.target, config=CONFIG, options=OPTIONS)
    proxy.refuse = True
    proxy.cut_all()
    await eventually(lambda: not client.connected)  # it noticed; it retries against refusals
    for _ in range(5):
        await client.append_audio(tone(100))  # numbered and kept, not lost
    await client.commit(create_response=True)
    assert not client.connected
    proxy.refuse = False
    events = await collect_until(client, "response_done")
    assert events[0].input_committed.audio_duration_ms == 500.0
    assert client.stats.reconnects == 1 and client.stats.resumed_applied == 0
    assert client.stats.last_resent == (1, 2, 3, 4, 5, 6)
    await client.close()


async def test_going_away_moves_the_session_without_a_visible_break(server: RunningServer) -> None:
    client = await DuplexClient.connect(server.target, config=CONFIG, options=OPTIONS)
    await client.heartbeat()
    events = await collect_until(client, "heartbeat_ack")
    drain = asyncio.create_task(server.drain(0.5))
    events = await collect_until(client, "going_away", into=events)
    await drain
    await client.heartbeat()
    events = await collect_until(client, "heartbeat_ack", into=events)
    assert kinds(events) == ["heartbeat_ack", "going_away", "heartbeat_ack"]
    assert client.stats.reconnects == 1
    assert_contiguous(events)
    await client.close()


async def test_acks_let_the_server_forget_delivered_events(server: RunningServer) -> None:
    client = await DuplexClient.connect(server.target, options=OPTIONS, ack_interval_s=0.05)
    for _ in range(3):
        await client.heartbeat()
    events = await collect_until(client, "heartbeat_ack")
    events = await collect_until(client, "heartbeat_ack", into=events)
    events = await collect_until(client, "heartbeat_ack", into=events)
    await eventually(lambda: journal_length(server, client.session_id) == 0)
    assert client.last_seq == 3
    await client.close()


async def test_random_cuts_keep_the_stream_exact(server: RunningServer, proxy: ChaosProxy) -> None:
    client = await DuplexClient.connect(proxy.target, config=CONFIG, options=OPTIONS)
    events: list[pb.ConverseResponse] = []
    proxy.cut_randomly(30_000)
    for turn in range(4):
        for _ in range(20):
            await client.append_audio(tone(50))
        await client.commit(create_response=True)
        events = await collect_until(client, "response_done", into=events)
        assert kinds(events).count("response_done") == turn + 1
    proxy.cut_randomly(None)
    assert client.stats.reconnects >= 1
    assert_contiguous(events)
    durations = [
        e.input_committed.audio_duration_ms
        for e in events
        if e.WhichOneof("event") == "input_committed"
    ]
    assert durations == [1000.0] * 4
    await client.close()


async def test_a_full_command_journal_waits_for_confirmation_then_flows(
    server: RunningServer, proxy: ChaosProxy
) -> None:
    options = dataclasses.replace(OPTIONS, max_unconfirmed_commands=4, ack_interval_s=0.05)
    client = await DuplexClient.connect(proxy.target, config=CONFIG, options=options)
    # Appends produce no events, so only the client's own heartbeats can confirm them.
    for _ in range(12):
        await client.append_audio(tone(CHUNK_MS))
    await eventually(lambda: client.applied_client_seq == 12)  # all confirmed: room for 4
    proxy.refuse = True
    proxy.cut_all()
    for _ in range(4):  # kept while the link is down (4 is the bound) ...
        await client.append_audio(tone(CHUNK_MS))
    blocked = asyncio.create_task(client.append_audio(tone(CHUNK_MS)))
    await asyncio.sleep(0.2)
    assert not blocked.done()  # ... and the fifth waits for room
    proxy.refuse = False
    assert await asyncio.wait_for(blocked, 5) == 17
    await client.commit(create_response=True)
    events = await collect_until(client, "response_done")
    committed = next(e for e in events if e.WhichOneof("event") == "input_committed")
    assert committed.input_committed.audio_duration_ms == 17 * CHUNK_MS
    assert "heartbeat_ack" in kinds(events)
    await client.close()


async def test_resume_tokens_never_reach_the_logs(
    server: RunningServer, proxy: ChaosProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = await DuplexClient.connect(proxy.target, options=OPTIONS)
    tokens = [client.resume_handle().resume_token]
    proxy.cut_all()
    await client.heartbeat()
    await collect_until(client, "heartbeat_ack")
    tokens.append(client.resume_handle().resume_token)
    assert tokens[0] != tokens[1]  # the resume rotated it
    assert client.stats.reconnects == 1 and "resumed" in caplog.text
    assert not any(token in caplog.text for token in tokens)
    assert not any(token in repr(client) for token in tokens)
    await client.close()
