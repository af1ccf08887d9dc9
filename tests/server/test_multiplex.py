"""ConverseMany against a real service: streams sharing a few calls behave as Converse calls,
and each stream's refusal reads as that call's status would."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from omni_grpc.client.channel import ChannelSettings, Connection
from omni_grpc.client.multiplex import MultiplexedConnection
from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_metadata
from omni_grpc.wire.stream_end import StreamBroken
from tests.client.proxy import ChaosProxy
from tests.serving import serving, settings

OPEN = pb.ConverseRequest(open_session=pb.OpenSession())
CLOSE = pb.ConverseRequest(client_seq=1, close_session=pb.CloseSession())


async def _session(connection: MultiplexedConnection) -> list[str]:
    stream = connection.converse()
    await stream.write(OPEN)
    created = await stream.read()
    assert created is not None and created.WhichOneof("event") == "session_created"
    await stream.write(CLOSE)
    kinds = []
    while (event := await stream.read()) is not None:
        kinds.append(event.WhichOneof("event") or "")
    return kinds


async def test_many_sessions_on_two_calls_each_open_and_close() -> None:
    async with serving(settings()) as running:
        connection = MultiplexedConnection(ChannelSettings(target=running.target), calls=2)
        try:
            endings = await asyncio.gather(*(_session(connection) for _ in range(12)))
        finally:
            await connection.close()
        assert all(kinds[-1] == "session_closed" for kinds in endings)
        assert len(running.registry) == 0


async def test_a_cancelled_stream_leaves_its_session_resumable() -> None:
    async with serving(settings()) as running:
        connection = MultiplexedConnection(ChannelSettings(target=running.target), calls=1)
        try:
            stream = connection.converse()
            await stream.write(OPEN)
            created = await stream.read()
            assert created is not None
            stream.cancel()
            with pytest.raises(StreamBroken):
                await stream.read()
            resume = pb.ResumeSession(
                session_id=created.session_created.session.id,
                resume_token=created.session_created.resume_token,
                last_received_seq=created.seq,
            )
            again = connection.converse()
            await again.write(pb.ConverseRequest(resume_session=resume))
            resumed = await again.read()
            assert resumed is not None and resumed.WhichOneof("event") == "session_resumed"
        finally:
            await connection.close()


async def _refusal(
    link: Connection | MultiplexedConnection, first: pb.ConverseRequest, key: str = ""
) -> StreamBroken:
    stream = link.converse(bearer_metadata(key))
    with pytest.raises(StreamBroken) as broken:
        await stream.write(first)  # a call refused at once may fail the write already
        while await stream.read() is not None:
            pass
    return broken.value


async def _both(running: RunningServer, first: pb.ConverseRequest, key: str = "") -> None:
    target = ChannelSettings(target=running.target)
    plain, many = Connection(target), MultiplexedConnection(target)
    try:
        remote, multiplexed = await _refusal(plain, first, key), await _refusal(many, first, key)
    finally:
        await plain.close()
        await many.close()
    assert (multiplexed.status, multiplexed.code, str(multiplexed)) == (
        remote.status,
        remote.code,
        str(remote),
    )
    assert multiplexed.retry_after_s == remote.retry_after_s


async def test_refusals_read_as_on_a_converse_call() -> None:
    unknown = pb.ResumeSession(session_id="sess_" + "0" * 32, resume_token="t")
    async with serving(settings()) as running:
        await _both(running, pb.ConverseRequest(resume_session=unknown))
        await _both(running, pb.ConverseRequest(client_seq=2, open_session=pb.OpenSession()))


async def test_each_stream_presents_its_own_key() -> None:
    async with serving(settings(api_keys=("k1",))) as running:
        await _both(running, OPEN, key="wrong")
        connection = MultiplexedConnection(ChannelSettings(target=running.target), calls=1)
        try:
            good = connection.converse(bearer_metadata("k1"))
            await good.write(OPEN)
            created = await good.read()
            assert created is not None and created.WhichOneof("event") == "session_created"
            refused = await _refusal(connection, OPEN, "wrong")
            assert refused.status is grpc.StatusCode.UNAUTHENTICATED
        finally:
            await connection.close()


async def test_a_broken_call_moves_unanswered_streams_and_ends_answered_ones() -> None:
    async with (
        serving(settings()) as running,
        ChaosProxy("127.0.0.1", running.grpc_port) as proxy,
    ):
        connection = MultiplexedConnection(ChannelSettings(target=proxy.target), calls=1)
        try:
            answered = connection.converse()
            await answered.write(OPEN)
            assert await answered.read() is not None
            # The connection dies (as when a proxy's replica dies) while an open is on its way.
            proxy.stall("up")
            unanswered = connection.converse()
            await unanswered.write(OPEN)
            await asyncio.sleep(0.1)
            proxy.cut_all()
            proxy.unstall("up")
            created = await asyncio.wait_for(unanswered.read(), 10)
            assert created is not None and created.WhichOneof("event") == "session_created"
            with pytest.raises(StreamBroken) as broken:
                while await answered.read() is not None:
                    pass
            assert broken.value.status is grpc.StatusCode.UNAVAILABLE  # its client resumes
        finally:
            await connection.close()


def _large_tools(count: int) -> pb.SessionConfig:
    """A configuration whose tools take ``count`` times 60 KiB (the contract allows 128)."""
    schema = '{"type": "object", "description": "' + "x" * 60_000 + '"}'
    tools = [pb.FunctionTool(name=f"tool_{n}", parameters_json=schema) for n in range(count)]
    return pb.SessionConfig(tools=pb.ToolSet(tools=tools))


async def test_events_larger_than_grpcs_default_limit_never_end_the_call() -> None:
    """Events of several streams queued together pass gRPC's 4 MiB default, and one event alone
    does too: the batches are cut at the call's send limit, and every stream goes on."""
    async with serving(settings()) as running:
        connection = MultiplexedConnection(ChannelSettings(target=running.target), calls=1)
        try:
            streams = [connection.converse() for _ in range(3)]
            for stream in streams:
                await stream.write(OPEN)
                created = await stream.read()
                assert created is not None and created.WhichOneof("event") == "session_created"
            sizes = (40, 40, 90)  # 2.4, 2.4 and 5.4 MB of tools
            for stream, count in zip(streams, sizes, strict=True):
                update = pb.UpdateSession(config=_large_tools(count))
                await stream.write(pb.ConverseRequest(client_seq=1, update_session=update))
            for stream, count in zip(streams, sizes, strict=True):
                updated = await stream.read()
                assert updated is not None and updated.WhichOneof("event") == "session_updated"
                assert len(updated.session_updated.session.config.tools.tools) == count
            for stream in streams:
                await stream.write(
                    pb.ConverseRequest(client_seq=2, close_session=pb.CloseSession())
                )
                kinds = []
                while (event := await stream.read()) is not None:
                    kinds.append(event.WhichOneof("event"))
                assert kinds[-1] == "session_closed"
        finally:
            await connection.close()
