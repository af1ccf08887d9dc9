"""The client against a real server: a whole turn, closing, refusals, and limits."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from omni_grpc.client import (
    ClientOptions,
    CommandTooLarge,
    ConnectionLost,
    DuplexClient,
    OpenRefused,
    ReconnectPolicy,
    SessionClosed,
)
from omni_grpc.core import Limits
from omni_grpc.server.app import RunningServer, start_server
from omni_grpc.wire import pb
from tests.client.conftest import (
    CONFIG,
    OPTIONS,
    assert_contiguous,
    collect_until,
    kinds,
    settings,
    tone,
)

ONE_SHOT = ClientOptions(open_retry=ReconnectPolicy(max_attempts=1))


async def test_a_turn_round_trips_in_order(server: RunningServer) -> None:
    client = await DuplexClient.connect(server.target, config=CONFIG, options=OPTIONS)
    assert client.session_id.startswith("sess_") and client.generation == 1
    assert client.capabilities.engine == "loopback"
    seqs = [await client.append_audio(tone(100)) for _ in range(5)]
    seqs.append(await client.commit(create_response=True))
    assert seqs == [1, 2, 3, 4, 5, 6]
    events = await collect_until(client, "response_done")
    assert_contiguous(events)
    order = kinds(events)
    assert order[0] == "input_committed" and order[-1] == "response_done"
    assert order.index("response_created") < order.index("output_audio_delta")
    committed = events[0].input_committed
    assert committed.audio_duration_ms == 500.0
    audio = b"".join(
        e.output_audio_delta.audio for e in events if e.WhichOneof("event") == "output_audio_delta"
    )
    assert len(audio) == 500 * 24 * 2  # the loopback answer: the same 500 ms, 24 kHz pcm16
    transcript = "".join(e.output_audio_transcript_delta.delta for e in events)
    assert transcript.startswith("you said 0.50 seconds")
    done = events[-1]
    assert done.response_done.response.status == pb.RESPONSE_STATUS_COMPLETED
    assert done.applied_client_seq == 6 and client.applied_client_seq == 6
    looked_up = await client.get_session()
    assert looked_up.session.state == pb.SESSION_STATE_ATTACHED
    assert looked_up.last_seq == events[-1].seq and looked_up.applied_client_seq == 6

    await client.close()
    rest = [event async for event in client.events()]  # ends quietly after the close
    assert kinds(rest) == ["session_closed"]
    assert rest[0].session_closed.reason == "client_close"
    with pytest.raises(SessionClosed):
        await client.heartbeat()
    await client.close()  # idempotent
    assert len(server.registry) == 0


async def test_context_manager_closes_the_session(server: RunningServer) -> None:
    async with await DuplexClient.connect(server.target, options=OPTIONS) as client:
        await client.heartbeat()
        assert kinds(await collect_until(client, "heartbeat_ack")) == ["heartbeat_ack"]
    assert len(server.registry) == 0
    assert "token" not in repr(client).lower()


async def test_bad_config_is_refused_with_its_code(server: RunningServer) -> None:
    config = pb.SessionConfig(
        input_audio_format=pb.AudioFormat(encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=12345)
    )
    with pytest.raises(OpenRefused) as refused:
        await DuplexClient.connect(server.target, config=config, options=OPTIONS)
    assert refused.value.status == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.code == "unsupported_audio_format"


async def test_capacity_refusal_carries_the_retry_hint() -> None:
    running = await start_server(settings(limits=Limits(max_sessions=1)))
    try:
        first = await DuplexClient.connect(running.target, options=OPTIONS)
        with pytest.raises(OpenRefused) as refused:
            await DuplexClient.connect(running.target, options=ONE_SHOT)
        assert refused.value.status == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused.value.code == "resource_exhausted"
        assert refused.value.retry_after_s == 1.0
        # With retries, the second open waits out the hint and gets the freed slot.
        started = time.monotonic()
        waiting = asyncio.create_task(DuplexClient.connect(running.target, options=OPTIONS))
        await asyncio.sleep(0.2)
        await first.close()
        second = await waiting
        assert time.monotonic() - started >= 1.0  # not before the server's hint
        await second.close()
    finally:
        await running.stop()


async def test_api_key_is_required_and_accepted() -> None:
    running = await start_server(settings(api_keys=("k-one", "k-two")))
    try:
        with pytest.raises(OpenRefused) as refused:
            await DuplexClient.connect(running.target, options=ONE_SHOT)
        assert refused.value.status == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(OpenRefused):
            await DuplexClient.connect(running.target, api_key="wrong", options=ONE_SHOT)
        client = await DuplexClient.connect(running.target, api_key="k-two", options=OPTIONS)
        assert "k-two" not in repr(client._conn.settings)
        await client.close()
    finally:
        await running.stop()


async def test_nothing_listening_fails_fast_and_clearly() -> None:
    started = time.monotonic()
    with pytest.raises(ConnectionLost) as lost:
        await DuplexClient.connect("127.0.0.1:1", options=OPTIONS)
    assert time.monotonic() - started < 6.0  # the open policy: 3 attempts within 5 s
    assert lost.value.status == grpc.StatusCode.UNAVAILABLE
    assert "127.0.0.1:1" in str(lost.value) and lost.value.attempts == 3


async def test_oversize_command_is_refused_before_sending() -> None:
    running = await start_server(settings(limits=Limits(max_message_bytes=64 * 1024)))
    try:
        client = await DuplexClient.connect(running.target, config=CONFIG, options=OPTIONS)
        with pytest.raises(CommandTooLarge):
            await client.append_audio(tone(3000))  # 96 000 bytes
        assert await client.append_audio(tone(100)) == 1  # nothing was numbered
        await client.close()
    finally:
        await running.stop()


async def test_send_copies_and_numbers_any_command(server: RunningServer) -> None:
    client = await DuplexClient.connect(server.target, options=OPTIONS)
    request = pb.ConverseRequest(client_seq=77, append_input_text=pb.AppendInputText(text="hi"))
    assert await client.send(request, event_id="evt-1") == 1
    assert request.client_seq == 77 and not request.event_id  # the caller's copy is untouched
    with pytest.raises(ValueError):
        await client.send(pb.ConverseRequest(open_session=pb.OpenSession()))
    with pytest.raises(ValueError):
        await client.send(pb.ConverseRequest())
    await client.create_response(instructions="short", metadata={"ticket": "7"})
    events = await collect_until(client, "response_done")
    assert events[-1].response_done.response.status == pb.RESPONSE_STATUS_COMPLETED
    # The metadata comes back on the response, as it was given, from announcement to end.
    created = next(e for e in events if e.WhichOneof("event") == "response_created")
    assert dict(created.response_created.response.metadata) == {"ticket": "7"}
    assert dict(events[-1].response_done.response.metadata) == {"ticket": "7"}
    await client.close()
