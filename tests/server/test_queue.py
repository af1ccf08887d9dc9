"""Admission at capacity over real streams: a session past capacity waits with its stream open,
told where it stands, and opens when a place frees; the bounds; a client that goes; a cut
wait that resumes and keeps its place; every transport the same (Converse, ConverseMany, the
in-process entry point); and no queue when none is asked for."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable

import grpc
import pytest

from omni_grpc.client.channel import ChannelSettings
from omni_grpc.client.multiplex import MultiplexedConnection
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import RunningServer
from omni_grpc.server.settings import QueueSettings
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_metadata
from omni_grpc.wire.stream_end import StreamBroken
from tests.server.streams import open_stream, read
from tests.serving import FakeClock, eventually, serving, settings

OPEN = pb.ConverseRequest(open_session=pb.OpenSession())
CLOSE = pb.ConverseRequest(client_seq=1, close_session=pb.CloseSession())


@contextlib.asynccontextmanager
async def queued(
    capacity: int = 1, clock: Callable[[], float] = time.monotonic, **queue: object
) -> AsyncIterator[tuple[RunningServer, duplex_pb2_grpc.DuplexServiceStub]]:
    """A server of ``capacity`` with a queue (``queue``: its settings), and a stub on it."""
    chosen = settings(
        queue=QueueSettings(capacity=capacity, **queue),  # type: ignore[arg-type]
        route="r1",
    )
    async with (
        serving(chosen, clock=clock) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        yield running, duplex_pb2_grpc.DuplexServiceStub(channel)


async def wait_in_line(stub: duplex_pb2_grpc.DuplexServiceStub) -> tuple[object, pb.SessionQueued]:
    """Opens a session on a full server; returns the call and its first session_queued."""
    call = stub.Converse()
    await call.write(OPEN)
    event = await read(call)
    assert event.WhichOneof("event") == "session_queued" and event.seq == 0, event
    return call, event.session_queued


async def next_notice(call: object) -> pb.SessionQueued:
    event = await read(call)  # type: ignore[arg-type]
    assert event.WhichOneof("event") == "session_queued", event
    return event.session_queued


def resume_wait(told: pb.SessionQueued, token: str) -> pb.ConverseRequest:
    return pb.ConverseRequest(
        resume_session=pb.ResumeSession(session_id=told.session_id, resume_token=token)
    )


def waiting(running: RunningServer) -> tuple[int, int]:
    """Sessions waiting with a stream, and without one, all classes together."""
    assert running.sessions.waiting is not None
    counts = running.sessions.waiting.queue.waiting().values()
    return sum(a for a, _ in counts), sum(d for _, d in counts)


async def test_a_session_past_capacity_waits_then_opens_under_the_id_it_waited_with() -> None:
    async with queued(capacity=1) as (running, stub):
        caps = await stub.GetCapabilities(pb.GetCapabilitiesRequest())
        assert caps.capabilities.capacity == 1
        first, created = await open_stream(stub)
        assert created.capabilities.capacity == 1
        second, told = await wait_in_line(stub)
        assert (told.position, told.priority_class, told.route) == (1, "default", "r1")
        assert told.resume_token and told.session_id.startswith("sess_")
        # No session ended yet: the guess is the least length, 1 s, less the first one's age.
        assert 0 < told.estimated_wait.ToMilliseconds() <= 1000
        assert dict(await second.initial_metadata())["x-omni-route"] == "r1"
        await first.write(CLOSE)
        event = await read(second)
        assert event.WhichOneof("event") == "session_created"
        assert event.session_created.session.id == told.session_id
        assert event.session_created.resume_token != told.resume_token
        assert running.registry.capabilities.capacity == 1
        second.cancel()
        first.cancel()


async def test_a_full_queue_refuses_at_once_typed_and_retryable() -> None:
    async with queued(capacity=1, max_length=1) as (_, stub):
        first, _ = await open_stream(stub)
        second, _ = await wait_in_line(stub)
        third = stub.Converse()
        await third.write(OPEN)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await read(third)
        broken = StreamBroken.from_error(refused.value)
        assert (broken.status, broken.code) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "queue_full",
        )
        assert broken.retry_after_s >= 1.0
        for call in (first, second):
            call.cancel()


async def test_a_wait_that_runs_out_is_refused_in_band_and_by_its_status() -> None:
    clock = FakeClock()
    async with queued(capacity=1, max_wait_s=30.0, clock=clock) as (running, stub):
        first, _ = await open_stream(stub)
        second, _ = await wait_in_line(stub)
        clock.advance(30.0)
        running.sessions.expire_due()
        event = await read(second)
        assert event.WhichOneof("event") == "error" and event.seq == 0
        assert (event.error.code, event.error.retryable) == ("queue_wait_exceeded", True)
        assert event.error.type == pb.ERROR_TYPE_RATE_LIMIT
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await read(second)
        broken = StreamBroken.from_error(refused.value)
        assert (broken.status, broken.code) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "queue_wait_exceeded",
        )
        assert broken.retry_after_s >= 1.0
        assert waiting(running) == (0, 0)
        first.cancel()


async def test_a_client_that_goes_leaves_the_queue_and_the_next_moves_up() -> None:
    async with queued(capacity=1) as (running, stub):
        first, _ = await open_stream(stub)
        second, _ = await wait_in_line(stub)
        third, told = await wait_in_line(stub)
        assert told.position == 2
        second.cancel()
        assert (await next_notice(third)).position == 1
        assert waiting(running) == (1, 1)  # second keeps its place for the grace
        await first.write(CLOSE)
        event = await read(third)  # second is away: passed over
        assert event.WhichOneof("event") == "session_created"
        assert event.session_created.session.id == told.session_id
        third.cancel()


async def test_a_cut_wait_resumed_within_the_grace_keeps_its_place() -> None:
    async with queued(capacity=1) as (running, stub):
        first, _ = await open_stream(stub)
        second, told = await wait_in_line(stub)
        token = told.resume_token
        third, _ = await wait_in_line(stub)
        second.cancel()  # the connection is cut
        assert (await next_notice(third)).position == 1
        again = stub.Converse()
        await again.write(resume_wait(told, token))
        back = await next_notice(again)
        assert (back.session_id, back.position, back.resume_token) == (told.session_id, 1, "")
        assert (await next_notice(third)).position == 2  # behind second again
        await first.write(CLOSE)
        event = await read(again)
        assert event.WhichOneof("event") == "session_created"
        assert event.session_created.session.id == told.session_id
        assert waiting(running) == (1, 0)
        for call in (again, third):
            call.cancel()


async def test_a_resume_while_a_stream_waits_takes_the_wait_over() -> None:
    async with queued(capacity=1) as (running, stub):
        first, _ = await open_stream(stub)
        second, told = await wait_in_line(stub)
        again = stub.Converse()
        await again.write(resume_wait(told, told.resume_token))
        assert (await next_notice(again)).position == 1
        replaced = await read(second)
        assert replaced.WhichOneof("event") == "session_replaced"
        assert await second.read() is grpc.aio.EOF
        assert await second.code() == grpc.StatusCode.OK
        await first.write(CLOSE)
        assert (await read(again)).WhichOneof("event") == "session_created"
        assert waiting(running) == (0, 0)
        again.cancel()


async def test_a_wrong_token_for_a_wait_gets_the_unknown_answer() -> None:
    async with queued(capacity=1) as (running, stub):
        first, _ = await open_stream(stub)
        second, told = await wait_in_line(stub)
        wrong = stub.Converse()
        await wrong.write(resume_wait(told, "x" * 43))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await read(wrong)
        broken = StreamBroken.from_error(refused.value)
        assert (broken.status, broken.code) == (
            grpc.StatusCode.NOT_FOUND,
            "session_resume_expired",
        )
        assert waiting(running) == (1, 0)
        for call in (first, second):
            call.cancel()


async def test_a_drain_ends_every_wait_so_the_client_opens_elsewhere() -> None:
    async with queued(capacity=1) as (running, stub):
        first, _ = await open_stream(stub)
        second, _ = await wait_in_line(stub)
        drain = asyncio.create_task(running.drain(5.0))
        event = await read(second)
        assert (event.WhichOneof("event"), event.error.code) == (
            "error",
            "server_shutting_down",
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await read(second)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        first.cancel()
        await drain


async def test_admitted_sessions_resume_as_ever_with_a_queue() -> None:
    async with queued(capacity=2) as (running, stub):
        first, created = await open_stream(stub)
        first.cancel()
        await eventually(lambda: len(running.registry) == 1 and waiting(running) == (0, 0))
        again = stub.Converse()
        await again.write(
            pb.ConverseRequest(
                resume_session=pb.ResumeSession(
                    session_id=created.session.id, resume_token=created.resume_token
                )
            )
        )
        assert (await read(again)).WhichOneof("event") == "session_resumed"
        again.cancel()


async def test_the_in_process_entry_waits_the_same_way() -> None:
    async with queued(capacity=1) as (running, _):
        local = running.local
        assert local is not None
        first = local.converse()
        await first.write(OPEN)
        assert (await first.read()) is not None
        second = local.converse()
        opening = asyncio.create_task(second.write(OPEN))  # waits for a place
        told = await asyncio.wait_for(second.read(), 10)
        assert told is not None and told.WhichOneof("event") == "session_queued"
        assert told.session_queued.position == 1 and not opening.done()
        await first.write(CLOSE)
        created = await asyncio.wait_for(second.read(), 10)
        assert created is not None and created.WhichOneof("event") == "session_created"
        assert created.session_created.session.id == told.session_queued.session_id
        await opening
        second.cancel()


async def test_a_stream_of_converse_many_waits_without_holding_the_others_back() -> None:
    async with queued(capacity=1) as (running, _):
        connection = MultiplexedConnection(ChannelSettings(target=running.target), calls=1)
        try:
            first = connection.converse()
            await first.write(OPEN)
            assert (await first.read()) is not None
            second = connection.converse()
            await second.write(OPEN)
            told = await second.read()
            assert told is not None and told.WhichOneof("event") == "session_queued"
            heartbeat = pb.ConverseRequest(heartbeat=pb.Heartbeat())
            await first.write(heartbeat)  # the first stream's commands still flow
            ack = await first.read()
            assert ack is not None and ack.WhichOneof("event") == "heartbeat_ack"
            await first.write(CLOSE)
            while (event := await second.read()) is not None:
                if event.WhichOneof("event") == "session_created":
                    break
            assert event is not None and event.WhichOneof("event") == "session_created"
            second.cancel()
        finally:
            await connection.close()


async def test_without_a_queue_a_session_past_max_sessions_is_refused_as_ever() -> None:
    limited = dataclasses.replace(
        settings(), limits=dataclasses.replace(settings().limits, max_sessions=1)
    )
    async with serving(limited) as running:
        assert running.sessions.waiting is None
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = duplex_pb2_grpc.DuplexServiceStub(channel)
            caps = await stub.GetCapabilities(pb.GetCapabilitiesRequest())
            assert caps.capabilities.capacity == 0
            first, _ = await open_stream(stub)
            second = stub.Converse()
            await second.write(OPEN)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await read(second)
            broken = StreamBroken.from_error(refused.value)
            assert (broken.status, broken.code) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "resource_exhausted",
            )
            first.cancel()


async def test_one_key_cannot_fill_the_queue_or_every_place_for_another() -> None:
    """Two keys, two places, one each: key-a queues up to its share of the queue (three
    quarters of 8), then is refused; key-b still finds room, and is admitted first (a higher
    class) when a place frees; key-a's cancelled waits free their room."""
    keys = ("key-a", "key-b")
    chosen = settings(
        api_keys=keys,
        queue=QueueSettings(capacity=2, max_length=8, classes=(("gold", ("key-b",)),)),
        route="r1",
    )
    async with (
        serving(chosen) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        a_key, b_key = bearer_metadata("key-a"), bearer_metadata("key-b")
        places = [(await open_stream(stub, metadata=key))[0] for key in (a_key, b_key)]
        a_waits = []
        for _ in range(6):
            call = stub.Converse(metadata=a_key)
            await call.write(OPEN)
            assert (await read(call)).WhichOneof("event") == "session_queued"
            a_waits.append(call)
        refused = stub.Converse(metadata=a_key)
        await refused.write(OPEN)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await read(refused)
        assert StreamBroken.from_error(error.value).code == "queue_full"
        b_wait = stub.Converse(metadata=b_key)
        await b_wait.write(OPEN)
        told = (await read(b_wait)).session_queued
        assert (told.position, told.priority_class) == (1, "gold")
        await places[0].write(CLOSE)
        assert (await read(b_wait)).WhichOneof("event") == "session_created"
        for call in a_waits:
            call.cancel()
        await eventually(lambda: waiting(running) == (0, 6))  # places kept, room freed
        again = stub.Converse(metadata=a_key)
        await again.write(OPEN)
        assert (await read(again)).WhichOneof("event") == "session_queued"
        for call in (again, b_wait, *places):
            call.cancel()
