"""Tenants that cannot starve each other, over a real socket: the attacks of issue 26.

Each test lets one caller (no key at all, or key ``A``) do what the probe did, then checks that
the other key (``B``) is still served: its calls answered, its session opened, its heartbeats
answered. The victim's service is what is asserted, never how long something took.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omni_grpc.core import Limits
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server import refusals
from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_metadata
from tests.server.streams import open_stream, read
from tests.serving import FakeClock, serving, settings

A, B = "key-a", "key-b"
STREAMS = 32  # the server's stream cap in these tests (1024 by default)
CAPABILITIES = "/omni.duplex.v1.DuplexService/GetCapabilities"
CONVERSE = "/omni.duplex.v1.DuplexService/Converse"
CHECK = "/grpc.health.v1.Health/Check"


@contextlib.asynccontextmanager
async def keyed_server(**overrides: object) -> AsyncIterator[RunningServer]:
    chosen: dict[str, object] = {"max_concurrent_streams": STREAMS, **overrides}
    async with serving(settings(api_keys=(A, B), **chosen)) as running:
        yield running


async def victim_is_served(target: str) -> None:
    """Key B asks for the capabilities, opens a session and has three heartbeats answered."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        metadata = bearer_metadata(B)
        capabilities = await stub.GetCapabilities(
            pb.GetCapabilitiesRequest(), metadata=metadata, timeout=30
        )
        assert capabilities.capabilities.max_sessions > 0
        call, _ = await open_stream(stub, metadata=metadata)
        for seq in (1, 2, 3):
            await call.write(pb.ConverseRequest(client_seq=seq, heartbeat=pb.Heartbeat()))
            assert (await read(call)).WhichOneof("event") == "heartbeat_ack"
        await call.write(pb.ConverseRequest(client_seq=4, close_session=pb.CloseSession()))
        call.cancel()


async def first_status(call: grpc.aio.Call) -> grpc.StatusCode | None:
    """The status of a call that has ended, or None while it is still open."""
    return await call.code() if call.done() else None


async def test_health_watches_without_a_key_cannot_take_the_service() -> None:
    async with keyed_server() as server:
        channels = [grpc.aio.insecure_channel(server.target) for _ in range(4)]
        watches = []
        try:
            for n in range(STREAMS + 8):
                stub = health_pb2_grpc.HealthStub(channels[n % len(channels)])
                watches.append(stub.Watch(health_pb2.HealthCheckRequest()))
            # Each held watch answers SERVING first; the others are refused with a status.
            answered = 0
            for watch in watches:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    first = await asyncio.wait_for(watch.read(), 30)
                    if first is not grpc.aio.EOF:
                        answered += 1
            await victim_is_served(server.target)
            assert answered < STREAMS  # not every one of them is held
        finally:
            for watch in watches:
                watch.cancel()
            for channel in channels:
                await channel.close()


async def test_calls_without_a_key_that_never_send_their_message_hold_nothing() -> None:
    async with keyed_server() as server, grpc.aio.insecure_channel(server.target) as channel:
        # A call to a method that needs a key, its request never sent: refused at once.
        silent = [channel.stream_stream(CAPABILITIES)() for _ in range(STREAMS + 8)]
        try:
            codes = await asyncio.wait_for(asyncio.gather(*(call.code() for call in silent)), 30)
            assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}
            await victim_is_served(server.target)
        finally:
            for call in silent:
                call.cancel()


async def test_silent_health_checks_without_a_key_hold_nothing() -> None:
    async with keyed_server() as server, grpc.aio.insecure_channel(server.target) as channel:
        # Health checks are open, but one whose request never comes holds only a place
        # among the few calls without a key.
        silent = [channel.stream_stream(CHECK)() for _ in range(STREAMS + 8)]
        try:
            await asyncio.sleep(1.0)  # the calls reach the server (nothing to await)
            await victim_is_served(server.target)
        finally:
            for call in silent:
                call.cancel()


async def test_streams_of_one_key_that_never_speak_leave_room_for_another_key() -> None:
    async with keyed_server() as server, grpc.aio.insecure_channel(server.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        silent = [stub.Converse(metadata=bearer_metadata(A)) for _ in range(STREAMS + 8)]
        try:
            await asyncio.sleep(0.5)  # the calls reach the server (nothing to await)
            await victim_is_served(server.target)
            # Key A's streams beyond its share were refused, typed and retryable.
            ended = [status for call in silent if (status := await first_status(call))]
            assert ended and set(ended) == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        finally:
            for call in silent:
                call.cancel()


async def test_one_key_cannot_hold_every_session() -> None:
    limits = Limits(disconnect_grace_s=5.0, max_sessions=8)
    async with (
        keyed_server(limits=limits) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        held, refusal = [], None
        for _ in range(limits.max_sessions):
            try:
                call, _ = await open_stream(stub, metadata=bearer_metadata(A))
            except grpc.aio.AioRpcError as error:
                refusal = error
                break
            held.append(call)
        try:
            assert refusal is not None, "key A opened every session"
            assert refusal.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert refusal.details().startswith("resource_exhausted: ")
            assert len(held) < limits.max_sessions
            await victim_is_served(server.target)
        finally:
            for call in held:
                call.cancel()


@pytest.mark.parametrize("what", ["open", "resume"])
async def test_one_key_opening_or_resuming_fast_is_refused_for_rate(what: str) -> None:
    async with keyed_server() as server, grpc.aio.insecure_channel(server.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        call, created = await open_stream(stub, metadata=bearer_metadata(A))
        call.cancel()
        request = (
            pb.ConverseRequest(open_session=pb.OpenSession())
            if what == "open"
            else pb.ConverseRequest(
                resume_session=pb.ResumeSession(
                    session_id=created.session.id, resume_token="not-the-token"
                )
            )
        )
        refused = None
        for _ in range(400):
            attempt = stub.Converse(metadata=bearer_metadata(A))
            await attempt.write(request)
            try:
                event = await asyncio.wait_for(attempt.read(), 30)
            except grpc.aio.AioRpcError as error:
                if error.details().startswith("rate_limit_exceeded: "):
                    refused = error
                    break
                continue
            finally:
                attempt.cancel()
            assert event is not grpc.aio.EOF
        assert refused is not None, f"key A was never refused for its {what} rate"
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await victim_is_served(server.target)


async def test_a_health_watch_without_a_key_ends_after_its_time() -> None:
    async with (
        keyed_server(keyless_call_s=0.5) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
        first = await asyncio.wait_for(watch.read(), 30)
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        assert await asyncio.wait_for(watch.read(), 30) is grpc.aio.EOF
        assert await watch.code() == grpc.StatusCode.OK  # it may watch again
        # With a key, a watch is the key's own business: it holds one of its places.
        keyed = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(), metadata=bearer_metadata(A)
        )
        await asyncio.wait_for(keyed.read(), 30)
        await asyncio.sleep(1.0)
        assert not keyed.done()
        keyed.cancel()


async def test_streams_that_never_speak_are_closed_sooner_when_streams_run_short() -> None:
    # Key A may hold every stream here, so streams run short (six of eight held).
    places = {"max_streams_per_key": 8, "max_streams_per_peer": 8}
    async with (
        keyed_server(max_concurrent_streams=8, **places) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        silent = [stub.Converse(metadata=bearer_metadata(A)) for _ in range(7)]
        try:
            # Well before the ten seconds a stream gets while places are plenty.
            codes = await asyncio.wait_for(asyncio.gather(*(call.code() for call in silent)), 8.0)
            assert set(codes) == {grpc.StatusCode.INVALID_ARGUMENT}
            assert {await call.details() for call in silent} == {
                "config_timeout: no first message in time"
            }
            await victim_is_served(server.target)
        finally:
            for call in silent:
                call.cancel()


def test_the_refusal_log_is_never_silent_about_a_new_peer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=refusals.__name__)
    log = refusals.RefusalLog(FakeClock())
    for port in range(refusals.MAX_LINES + 10):  # one prober spends the lines
        log.refused("resume", "sess_x", f"ipv4:10.0.0.1:{port}", "session_resume_expired")
    log.refused("resume", "sess_y", "ipv4:10.0.0.2:4000", "session_resume_expired")
    log.refused("resume", "sess_y", "ipv4:10.0.0.2:4001", "session_resume_expired")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == refusals.MAX_LINES + 1
    assert "peer ipv4:10.0.0.2:4000" in lines[-1]  # the new peer's first refusal
    assert log.suppressed == 11
    for n in range(2 * refusals.MAX_NEW_PEERS):  # a prober of many addresses is bounded too
        log.refused("resume", "", f"ipv4:10.1.{n // 256}.{n % 256}:1", "session_resume_expired")
    assert len(caplog.records) == refusals.MAX_LINES + refusals.MAX_NEW_PEERS
