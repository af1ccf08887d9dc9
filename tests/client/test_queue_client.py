"""The Python client on a server at capacity: an open waits in the queue (each notice to
``on_queued``) and returns with the session it waited for; a wait that runs out is refused
typed; a wait cut in the transport is resumed and keeps its place."""

from __future__ import annotations

import asyncio
import dataclasses

import grpc
import pytest

from omni_grpc.client import DuplexClient
from omni_grpc.client.errors import OpenRefused
from omni_grpc.client.options import ClientOptions
from omni_grpc.server.settings import QueueSettings
from omni_grpc.wire import pb
from tests.client.proxy import ChaosProxy
from tests.serving import FakeClock, eventually, serving, settings

TIMEOUT_S = 30.0


def queued(capacity: int = 1, **queue: object) -> object:
    return settings(queue=QueueSettings(capacity=capacity, **queue))  # type: ignore[arg-type]


def options(notices: list[pb.SessionQueued]) -> ClientOptions:
    return ClientOptions(on_queued=notices.append)


async def test_an_open_waits_its_turn_and_gets_the_session_it_waited_for() -> None:
    async with serving(queued()) as running:  # type: ignore[arg-type]
        first = await DuplexClient.connect(running.target)
        notices: list[pb.SessionQueued] = []
        opening = asyncio.create_task(
            DuplexClient.connect(running.target, options=options(notices))
        )
        await eventually(lambda: len(notices) == 1, timeout_s=TIMEOUT_S)
        assert notices[0].position == 1 and not opening.done()
        await first.close()
        second = await asyncio.wait_for(opening, TIMEOUT_S)
        assert second.session_id == notices[0].session_id
        await second.close()


async def test_a_wait_that_runs_out_is_refused_typed_and_retryable() -> None:
    clock = FakeClock()
    async with serving(queued(max_wait_s=30.0), clock=clock) as running:  # type: ignore[arg-type]
        first = await DuplexClient.connect(running.target)
        notices: list[pb.SessionQueued] = []
        opening = asyncio.create_task(
            DuplexClient.connect(running.target, options=options(notices))
        )
        await eventually(lambda: len(notices) == 1, timeout_s=TIMEOUT_S)
        clock.advance(30.0)
        running.sessions.expire_due()
        with pytest.raises(OpenRefused) as refused:
            await asyncio.wait_for(opening, TIMEOUT_S)
        assert (refused.value.status, refused.value.code) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "queue_wait_exceeded",
        )
        assert refused.value.retry_after_s >= 1.0
        await first.close()


async def test_a_wait_cut_in_the_transport_is_resumed_and_keeps_its_place() -> None:
    async with serving(queued()) as running:  # type: ignore[arg-type]
        host, port = running.target.split(":")
        first = await DuplexClient.connect(running.target)
        async with ChaosProxy(host, int(port), seed=1) as proxy:
            notices: list[pb.SessionQueued] = []
            cut_one = asyncio.create_task(
                DuplexClient.connect(proxy.target, options=options(notices))
            )
            await eventually(lambda: len(notices) == 1, timeout_s=TIMEOUT_S)
            behind: list[pb.SessionQueued] = []
            direct = asyncio.create_task(
                DuplexClient.connect(running.target, options=options(behind))
            )
            await eventually(lambda: len(behind) == 1, timeout_s=TIMEOUT_S)
            assert behind[0].position == 2
            assert proxy.cut_all() >= 1
            # Cut, it is passed over (the one behind moves up), then resumes its place.
            await eventually(
                lambda: (
                    any(n.position == 1 for n in behind[1:])
                    and running.sessions.waiting is not None
                    and running.sessions.waiting.queue.waiting()["default"] == (2, 0)
                ),
                timeout_s=TIMEOUT_S,
            )
            assert notices[-1].session_id == notices[0].session_id
            await first.close()
            resumed = await asyncio.wait_for(cut_one, TIMEOUT_S)
            assert resumed.session_id == notices[0].session_id
            assert not direct.done()
            await resumed.close()
            second = await asyncio.wait_for(direct, TIMEOUT_S)
            await second.close()


async def test_a_full_queue_refuses_the_open_with_its_hint() -> None:
    chosen = dataclasses.replace(queued(max_length=0))  # type: ignore[type-var]
    async with serving(chosen) as running:
        first = await DuplexClient.connect(running.target)
        with pytest.raises(OpenRefused) as refused:
            await DuplexClient.connect(running.target)
        assert (refused.value.status, refused.value.code) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "queue_full",
        )
        await first.close()
