"""The bridge on a server at capacity, on every path to the service: a client with the duplex
extensions is told ``session.queued`` while its session waits; a stock client is told nothing
and gets ``session.created`` later, and a typed ``rate_limit_error`` when the wait runs out."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from omni_grpc.server.app import RunningServer
from omni_grpc.server.settings import QueueSettings
from tests.bridge.testkit import WITH_EXTENSIONS, realtime_socket, running_bridge, service_settings
from tests.serving import FakeClock, eventually, serving

PATHS = ("in_process", "multiplexed", "grpc")


@contextlib.asynccontextmanager
async def full_service(
    path: str, clock: FakeClock | None = None
) -> AsyncIterator[tuple[RunningServer, int]]:
    """A service of capacity 1 with a queue, and a bridge in front of it on ``path``."""
    chosen = service_settings(queue=QueueSettings(capacity=1, max_wait_s=30.0))
    async with serving(chosen, **({"clock": clock} if clock else {})) as running:
        target: str | RunningServer = running if path == "in_process" else running.target
        options = {} if path == "in_process" else {"multiplex": path == "multiplexed"}
        async with running_bridge(target, **options) as port:
            yield running, port


def waiting(running: RunningServer) -> int:
    assert running.sessions.waiting is not None
    return sum(attached for attached, _ in running.sessions.waiting.queue.waiting().values())


@pytest.mark.parametrize("path", PATHS)
async def test_an_extension_client_is_told_its_place_then_gets_its_session(path: str) -> None:
    async with (
        full_service(path) as (running, port),
        realtime_socket(port, WITH_EXTENSIONS) as first,
    ):
        await first.until("session.created")
        async with realtime_socket(port, WITH_EXTENSIONS) as second:
            queued = await second.recv()
            assert queued["type"] == "session.queued"
            assert (queued["position"], queued["priority_class"]) == (1, "default")
            assert queued["resume_token"] and queued["estimated_wait_ms"] >= 0
            await first.send({"type": "session.close"})
            await first.until("session.closed")
            created = (await second.until("session.created"))[-1]
            assert created["session"]["id"] == queued["session_id"]
        await eventually(lambda: waiting(running) == 0)


@pytest.mark.parametrize("path", PATHS)
async def test_a_stock_client_just_gets_its_session_later(path: str) -> None:
    async with (
        full_service(path) as (running, port),
        realtime_socket(port, WITH_EXTENSIONS) as first,
    ):
        await first.until("session.created")  # before the second connects: it has the place
        async with realtime_socket(port) as second:
            await eventually(lambda: waiting(running) == 1)
            await first.send({"type": "session.close"})
            await first.until("session.closed")
            assert (await second.recv(wait_s=10.0))["type"] == "session.created"  # nothing before


@pytest.mark.parametrize("path", PATHS)
async def test_a_stock_client_whose_wait_runs_out_gets_a_typed_error(path: str) -> None:
    clock = FakeClock()
    async with full_service(path, clock) as (running, port), realtime_socket(port) as first:
        await first.until("session.created")  # before the second connects: it has the place
        async with realtime_socket(port) as second:
            await eventually(lambda: waiting(running) == 1)
            clock.advance(30.0)
            running.sessions.expire_due()
            error = await second.recv(wait_s=10.0)
            assert error["type"] == "error"
            assert (error["error"]["type"], error["error"]["code"]) == (
                "rate_limit_error",
                "queue_wait_exceeded",
            )
            while True:  # the same in band and by status (grpc), then rate_limits.updated
                event = await second.recv(wait_s=10.0)
                if event["type"] != "error":
                    break
            assert event["type"] == "rate_limits.updated"
            code, reason = await second.closed()
            assert (code, reason) == (1013, "queue_wait_exceeded")
