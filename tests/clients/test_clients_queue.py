"""The Go and Node clients against a server at capacity with an admission queue
(``omni-grpc serve --capacity 1``): an open past capacity waits, told its place, and is admitted
with session_created once the session before it closes; a wait cut in the transport is resumed
on the replica its route names and keeps its place; a wait the server refuses comes back as
the client's typed refusal, with its code and retry delay.

The place is held by the test's own session on a raw stream, so the client's open is queued
for sure and admitted only when the test closes it: no race with the clock.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from omni_grpc.core.limits import Limits
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import RunningServer
from omni_grpc.server.settings import QueueSettings
from omni_grpc.wire import pb
from tests.client.proxy import ChaosProxy
from tests.clients.driver import Client, assert_server_agrees, gliding_tone, queued_positions
from tests.clients.server_truth import ServerTruth
from tests.server.streams import open_stream, read_until
from tests.serving import eventually, serving, settings

# A cold build compiles grpc-go from source, which takes a while on two busy cores.
pytestmark = pytest.mark.timeout(300)
CLIENT_START_S = 60  # generous: the client only has to start and send its open


@asynccontextmanager
async def holding_the_place(
    running: RunningServer, api_key: str
) -> AsyncIterator[tuple[str, grpc.aio.StreamStreamCall]]:
    """The server's one place, taken by a session of the test's own: its id and stream."""
    async with grpc.aio.insecure_channel(running.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        call, created = await open_stream(stub, metadata=(("authorization", f"Bearer {api_key}"),))
        yield created.session.id, call


async def close(call: grpc.aio.StreamStreamCall) -> None:
    await call.write(pb.ConverseRequest(client_seq=1, close_session=pb.CloseSession()))
    await read_until(call, "session_closed")


def waiting_with_a_stream(running: RunningServer) -> int:
    assert running.sessions.waiting is not None
    return sum(attached for attached, _ in running.sessions.waiting.queue.waiting().values())


async def test_a_queued_open_is_told_its_place_and_admitted_when_one_frees(
    client: Client, truth: ServerTruth, tmp_path: Path
) -> None:
    sent = gliding_tone(tmp_path / "in.wav", 0.5)
    queue = QueueSettings(capacity=1)
    async with (
        serving(settings(api_keys=(client.api_key,), queue=queue)) as running,
        holding_the_place(running, client.api_key) as (holder_id, holder),
    ):
        process = await client.start(running.target, tmp_path / "in.wav", tmp_path / "out.wav")
        await eventually(lambda: waiting_with_a_stream(running) == 1, timeout_s=CLIENT_START_S)
        await close(holder)  # the place frees: the client's session is admitted
        run = await client.finish(process, tmp_path / "out.wav")
    assert run.queued_at[0] == 1  # told its place, first in line
    assert set(run.queued_at) == {1}
    assert truth.opened == [holder_id, run.session_id]
    truth.opened.remove(holder_id)  # the test's own session; the rest is the client's
    assert_server_agrees(client, truth, run, sent)
    assert run.reconnects == 0
    assert [e.kind for e in run.events if not e.seq] == ["session_created"]


async def notices_read(process: asyncio.subprocess.Process, count: int) -> list[int]:
    """Reads the client's stderr until it printed ``count`` queue notices; their positions."""
    assert process.stderr is not None
    positions: list[int] = []
    while len(positions) < count:
        line = await asyncio.wait_for(process.stderr.readline(), CLIENT_START_S)
        assert line, "the client ended its stderr before it was queued"
        positions += queued_positions(line.decode())
    return positions


async def test_a_cut_wait_resumes_on_its_replica_and_keeps_its_place(
    client: Client, truth: ServerTruth, tmp_path: Path
) -> None:
    sent = gliding_tone(tmp_path / "in.wav", 0.5)
    chosen = settings(api_keys=(client.api_key,), queue=QueueSettings(capacity=1), route="r7")
    async with (
        serving(chosen) as running,
        ChaosProxy("127.0.0.1", running.grpc_port, seed=client.seeds["served"]) as proxy,
        holding_the_place(running, client.api_key) as (holder_id, holder),
    ):
        process = await client.start(proxy.target, tmp_path / "in.wav", tmp_path / "out.wav")
        assert await notices_read(process, 1) == [1]
        assert proxy.cut_all() >= 1
        # The resumed wait's stream is told its place again: the wait is attached to it.
        assert await notices_read(process, 1) == [1]
        await close(holder)
        run = await client.finish(process, tmp_path / "out.wav")
    # The holder's call, the open, and the wait's resume, which went to the wait's replica.
    assert truth.call_routes == ["", "", "r7"]
    assert truth.opened == [holder_id, run.session_id]
    truth.opened.remove(holder_id)
    assert_server_agrees(client, truth, run, sent)  # one session, opened once, not twice
    assert run.route == "r7"


async def test_a_refused_wait_is_the_clients_typed_refusal_with_its_code(
    client: Client, truth: ServerTruth, tmp_path: Path
) -> None:
    gliding_tone(tmp_path / "in.wav", 0.2)
    queue = QueueSettings(capacity=1, max_wait_s=1.0)  # the server's bound, not the test's
    limits = Limits(disconnect_grace_s=5.0, open_retry_after_s=2.5)  # the delay it advises
    chosen = settings(api_keys=(client.api_key,), queue=queue, limits=limits)
    async with (
        serving(chosen) as running,
        holding_the_place(running, client.api_key) as (holder_id, holder),
    ):
        process = await client.start(running.target, tmp_path / "in.wav", tmp_path / "out.wav")
        stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
        await close(holder)
    text = stderr.decode()
    assert process.returncode == 3, text  # the commands' status for a refused wait
    assert queued_positions(text)[0] == 1, text
    refused = re.search(r"^refused: (\S+), retry after (\d+) ms$", text, re.MULTILINE)
    assert refused and refused.group(1) == "queue_wait_exceeded", text
    assert int(refused.group(2)) == 2500, text
    assert b"session_created" not in stdout
    assert truth.opened == [holder_id]  # the client's session was never admitted
