"""The gRPC service over a real socket: round trips, resume, takeover, expiry, refusals.

Time-dependent rules (grace, expiry) run on a :class:`~tests.serving.FakeClock` that the test
moves; one test proves the expiry timer also fires on the real clock.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from omni_grpc.core import Limits, State
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import start_server
from omni_grpc.wire import pb
from omni_grpc.wire.keys import resume_token_metadata
from tests.server.streams import kinds, open_stream, pcm16, read, read_until, resume_request
from tests.serving import FakeClock, eventually, self_signed_certificate, serving, settings


def append(seq: int, ms: int = 200) -> pb.ConverseRequest:
    return pb.ConverseRequest(
        client_seq=seq, append_input_audio=pb.AppendInputAudio(audio=pcm16(ms))
    )


def commit(seq: int) -> pb.ConverseRequest:
    return pb.ConverseRequest(client_seq=seq, commit_input_audio=pb.CommitInputAudio())


def error_info(error: grpc.aio.AioRpcError) -> list[object]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "no google.rpc.Status in the trailers"
    details = []
    for detail in status.details:
        for kind in (error_details_pb2.ErrorInfo, error_details_pb2.RetryInfo):
            if detail.Is(kind.DESCRIPTOR):
                unpacked = kind()
                detail.Unpack(unpacked)
                details.append(unpacked)
    return details


async def test_a_turn_round_trips_with_contiguous_numbers(stub) -> None:
    call, created = await open_stream(stub)
    assert created.attachment_generation == 1 and len(created.resume_token) == 43
    assert created.capabilities.protocol_version == "omni.duplex.v1"
    await call.write(append(1))
    await call.write(commit(2))
    events = await read_until(call, "response_done")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].applied_client_seq == 2
    names = kinds(events)
    assert names.index("input_committed") < names.index("response_created")
    audio = b"".join(
        e.output_audio_delta.audio for e in events if e.WhichOneof("event") == "output_audio_delta"
    )
    # The loopback answers with the committed audio; 200 ms at 24 kHz pcm16 is 9600 bytes.
    assert abs(len(audio) - 9600) <= 96
    assert events[-1].response_done.response.status == pb.RESPONSE_STATUS_COMPLETED
    call.cancel()


async def test_resume_replays_exactly_the_missed_events(stub) -> None:
    call, created = await open_stream(stub)
    await call.write(append(1))
    await call.write(commit(2))
    events = await read_until(call, "response_done")
    call.cancel()
    cursor = events[2].seq
    again = stub.Converse()
    await again.write(resume_request(created, cursor))
    resumed = await read(again)
    assert resumed.WhichOneof("event") == "session_resumed"
    assert resumed.applied_client_seq == 2
    assert resumed.session_resumed.attachment_generation == 2
    assert resumed.session_resumed.replayed_events == len(events) - cursor
    replay = [await read(again) for _ in range(len(events) - cursor)]
    assert [e.SerializeToString() for e in replay] == [
        e.SerializeToString() for e in events[cursor:]
    ]
    # The old token was rotated away.
    third = stub.Converse()
    await third.write(resume_request(created))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await read(third)
    # The answer an unknown session gets: a refusal tells nothing about which ids exist.
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    again.cancel()


async def test_takeover_tells_the_old_stream_and_ignores_it(stub) -> None:
    first, created = await open_stream(stub)
    second = stub.Converse()
    await second.write(resume_request(created))
    assert (await read(second)).WhichOneof("event") == "session_resumed"
    replaced = await read(first)
    assert replaced.session_replaced.attachment_generation == 1
    assert await asyncio.wait_for(first.read(), 5) is grpc.aio.EOF
    await second.write(pb.ConverseRequest(client_seq=1, heartbeat=pb.Heartbeat()))
    ack = await read(second)
    assert ack.WhichOneof("event") == "heartbeat_ack" and ack.applied_client_seq == 1
    second.cancel()


async def test_a_detached_session_expires_after_its_grace() -> None:
    clock = FakeClock()
    async with (
        serving(settings(limits=Limits(disconnect_grace_s=0.3)), clock=clock) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        call, created = await open_stream(stub)
        call.cancel()
        [session] = running.registry
        await eventually(lambda: session.state is State.DETACHED)
        clock.advance(0.29)
        running.sessions.expire_due()
        assert len(running.registry) == 1  # detached, waiting for a resume
        clock.advance(0.02)
        running.sessions.expire_due()
        assert len(running.registry) == 0  # expired: the slot is free
        resume = resume_request(created)
        # Within one more grace, a late client still learns how its session ended.
        clock.advance(0.29)
        late = stub.Converse()
        await late.write(resume)
        assert (await read(late)).WhichOneof("event") == "session_resumed"
        ending = await read(late)
        assert ending.session_expired.reason == pb.EXPIRY_REASON_DISCONNECT_GRACE
        assert ending.seq == 1
        assert await asyncio.wait_for(late.read(), 5) is grpc.aio.EOF
        # One who has seen the ending gets a plain refusal.
        seen = stub.Converse()
        resume.resume_session.last_received_seq = 1
        await seen.write(resume)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await read(seen)
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        # After that, the session is forgotten.
        clock.advance(0.02)
        running.sessions.expire_due()
        gone = stub.Converse()
        resume.resume_session.last_received_seq = 0
        await gone.write(resume)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await read(gone)
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND


async def test_the_expiry_timer_runs_on_the_real_clock() -> None:
    """The one test that waits in real time: the timer task is wired to the server's clock."""
    async with (
        serving(settings(limits=Limits(disconnect_grace_s=0.2))) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        call, _ = await open_stream(duplex_pb2_grpc.DuplexServiceStub(channel))
        call.cancel()
        await eventually(lambda: len(running.registry) == 0)


async def test_admission_refuses_with_a_retry_hint() -> None:
    running = await start_server(settings(limits=Limits(max_sessions=1)))
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = duplex_pb2_grpc.DuplexServiceStub(channel)
            first, _ = await open_stream(stub)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await open_stream(stub)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            details = error_info(refused.value)
            assert details[0].reason == "RESOURCE_EXHAUSTED"
            assert details[1].retry_delay.ToMilliseconds() == 1000
            first.cancel()
    finally:
        await running.stop()


async def test_a_bad_first_message_is_invalid_argument(stub) -> None:
    call = stub.Converse()
    await call.write(pb.ConverseRequest(client_seq=1, heartbeat=pb.Heartbeat()))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await read(call)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(refused.value)[0].reason == "BAD_FIRST_MESSAGE"


async def test_an_impossible_config_is_refused_on_open(stub) -> None:
    config = pb.SessionConfig(input_audio_format=pb.AudioFormat(sample_rate_hz=12345))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await open_stream(stub, config)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unsupported_audio_format" in (refused.value.details() or "")


async def test_bad_commands_get_typed_errors_and_the_stream_goes_on(stub) -> None:
    call, _ = await open_stream(stub)
    await call.write(pb.ConverseRequest(client_seq=5, heartbeat=pb.Heartbeat(), event_id="e5"))
    gap = await read(call)
    assert (gap.error.code, gap.error.client_seq, gap.error.event_id) == ("client_seq_gap", 5, "e5")
    torn = pb.ConverseRequest(client_seq=1, append_input_audio=pb.AppendInputAudio(audio=b"\0"))
    await call.write(torn)
    assert (await read(call)).error.code == "bad_audio"
    await call.write(commit(2))
    assert (await read(call)).error.code == "input_audio_buffer_empty"
    await call.write(pb.ConverseRequest(client_seq=3, create_response=pb.CreateResponse()))
    assert (await read(call)).error.code == "response_create_without_input"
    await call.write(append(4))
    await call.write(commit(5))
    events = await read_until(call, "response_done")
    assert events[-1].response_done.response.status == pb.RESPONSE_STATUS_COMPLETED
    call.cancel()


async def test_an_oversize_command_is_refused_in_band() -> None:
    running = await start_server(settings(limits=Limits(max_message_bytes=64 * 1024)))
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            call, _ = await open_stream(duplex_pb2_grpc.DuplexServiceStub(channel))
            await call.write(
                pb.ConverseRequest(
                    client_seq=1, append_input_audio=(pb.AppendInputAudio(audio=bytes(100 * 1024)))
                )
            )
            assert (await read(call)).error.code == "event_too_large"
            await call.write(pb.ConverseRequest(client_seq=2, heartbeat=pb.Heartbeat()))
            assert (await read(call)).WhichOneof("event") == "heartbeat_ack"
            call.cancel()
    finally:
        await running.stop()


async def test_api_keys_guard_every_call() -> None:
    # Health closed too (--no-open-health); tests/server/test_tenancy.py has it open.
    running = await start_server(settings(api_keys=("secret-key",), open_health=False))
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = duplex_pb2_grpc.DuplexServiceStub(channel)
            health_stub = health_pb2_grpc.HealthStub(channel)
            for metadata in (None, (("authorization", "Bearer wrong"),)):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await open_stream(stub, metadata=metadata)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await health_stub.Check(health_pb2.HealthCheckRequest(), metadata=metadata)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            good = (("authorization", "Bearer secret-key"),)
            call, _ = await open_stream(stub, metadata=good)
            call.cancel()
            reply = await health_stub.Check(health_pb2.HealthCheckRequest(), metadata=good)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await running.stop()


async def test_health_and_reflection_answer(server) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        checked = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="omni.duplex.v1.DuplexService")
        )
        assert checked.status == health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo()
        await reflect.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        listed = await reflect.read()
        names = {s.name for s in listed.list_services_response.service}
        assert "omni.duplex.v1.DuplexService" in names
        await reflect.write(
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol="omni.duplex.v1.DuplexService"
            )
        )
        described = await reflect.read()
        assert described.file_descriptor_response.file_descriptor_proto
        await reflect.done_writing()


async def test_unary_lookups(stub) -> None:
    caps = await stub.GetCapabilities(pb.GetCapabilitiesRequest())
    assert caps.capabilities.engine == "loopback"
    call, created = await open_stream(stub)
    await call.write(pb.ConverseRequest(client_seq=1, heartbeat=pb.Heartbeat()))
    await read(call)
    lookup = pb.GetSessionRequest(session_id=created.session.id)
    # The token travels in call metadata, never in the message.
    found = await stub.GetSession(lookup, metadata=resume_token_metadata(created.resume_token))
    assert (found.last_seq, found.applied_client_seq) == (1, 1)
    assert found.session.state == pb.SESSION_STATE_ATTACHED
    for metadata in (resume_token_metadata("x" * 43), ()):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.GetSession(lookup, metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        assert refused.value.details().startswith("session_not_found")
    call.cancel()


async def test_drain_warns_attached_streams_and_refuses_new_ones() -> None:
    running = await start_server(settings())
    async with grpc.aio.insecure_channel(running.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        call, _ = await open_stream(stub)
        drain = asyncio.create_task(running.drain(2.0))
        warned = await read(call)
        assert warned.WhichOneof("event") == "going_away"
        assert 0 < warned.going_away.time_left.ToMilliseconds() <= 2000
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await open_stream(stub)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        call.cancel()  # the client moves elsewhere: drain ends early
        await asyncio.wait_for(drain, 1.5)
    await running.stop()


@pytest.mark.subprocess
async def test_tls_serves_trusting_clients_only(tmp_path) -> None:
    cert, key = self_signed_certificate(tmp_path)
    running = await start_server(settings(tls_cert_file=str(cert), tls_key_file=str(key)))
    try:
        trusted = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        async with grpc.aio.secure_channel(running.target, trusted) as channel:
            call, created = await open_stream(duplex_pb2_grpc.DuplexServiceStub(channel))
            assert created.session.id
            call.cancel()
        async with grpc.aio.insecure_channel(running.target) as plain:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await duplex_pb2_grpc.DuplexServiceStub(plain).GetCapabilities(
                    pb.GetCapabilitiesRequest(), timeout=5
                )
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await running.stop()
