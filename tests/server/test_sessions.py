"""The sessions of one server without a socket: open, resume, expiry and drain on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from omni_grpc.core import Limits, Registry, State, StreamRefused
from omni_grpc.engine import create_engine
from omni_grpc.server.host import SendQueue
from omni_grpc.server.sessions import ResumeFoundEnded, Sessions
from omni_grpc.wire import pb
from tests.serving import FakeClock

GRACE_S = 2.0


@pytest.fixture
async def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def sessions(clock: FakeClock) -> AsyncIterator[Sessions]:
    engine = create_engine("loopback", {"pace": "fast"})
    await engine.start()
    registry = Registry(Limits(disconnect_grace_s=GRACE_S), engine.features)
    sessions = Sessions(registry, engine, clock)
    yield sessions
    await sessions.abandon()
    await engine.stop()


async def next_event(queue: SendQueue) -> pb.ConverseResponse:
    payload = await asyncio.wait_for(queue.next(), 5)
    assert payload is not None, "the stream was ended"
    return pb.ConverseResponse.FromString(payload)


async def test_a_released_session_expires_on_the_clock_it_was_given(
    sessions: Sessions, clock: FakeClock
) -> None:
    host, queue = await sessions.open(pb.OpenSession())
    assert (await next_event(queue)).WhichOneof("event") == "session_created"
    sessions.release(host, queue)
    assert host.session.state is State.DETACHED
    clock.advance(GRACE_S - 0.01)
    sessions.expire_due()
    assert len(sessions.registry) == 1 and list(sessions) == [host]
    clock.advance(0.02)
    sessions.expire_due()
    assert len(sessions.registry) == 0 and list(sessions) == []
    assert host.session.state.terminal


async def test_a_resume_after_the_ending_replays_it(sessions: Sessions) -> None:
    host, queue = await sessions.open(pb.OpenSession())
    created = (await next_event(queue)).session_created
    await host.receive(1, pb.ConverseRequest(client_seq=1, close_session=pb.CloseSession()))
    ending = await next_event(queue)
    assert ending.WhichOneof("event") == "session_closed"
    sessions.release(host, queue)
    resume = pb.ResumeSession(session_id=created.session.id, resume_token=created.resume_token)
    with pytest.raises(ResumeFoundEnded) as ended:
        await sessions.resume(resume)
    replayed = [pb.ConverseResponse.FromString(p) for _, p in ended.value.effects.sends]
    assert [e.WhichOneof("event") for e in replayed][-1] == "session_closed"


async def test_a_drain_warns_refuses_and_ends_when_the_last_stream_lets_go(
    sessions: Sessions,
) -> None:
    host, queue = await sessions.open(pb.OpenSession())
    await next_event(queue)  # session_created
    drain = asyncio.create_task(sessions.drain(30.0))
    warned = await next_event(queue)
    assert warned.WhichOneof("event") == "going_away"
    assert warned.going_away.time_left.ToMilliseconds() == 30_000
    with pytest.raises(StreamRefused) as refused:
        await sessions.open(pb.OpenSession())
    assert refused.value.code == "server_shutting_down"
    assert not drain.done()
    sessions.release(host, queue)
    await asyncio.wait_for(drain, 1.0)  # long before its grace
