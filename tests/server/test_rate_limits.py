"""Rate limits over a real socket: a flood gets typed refusals, the flooder waits and goes on,
and nobody else notices.

The server runs on a :class:`~tests.serving.FakeClock`, so no bucket refills while a test sends
and "waiting" is moving the clock by the retry hint.
"""

from __future__ import annotations

import grpc

from omni_grpc.core import Limits
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_metadata
from tests.server.streams import kinds, open_stream, pcm16, read, read_until
from tests.serving import FakeClock, serving, settings

# A bucket of 20 commands refilling at 20 a second; 100 ms of 24 kHz pcm16 audio is 4800 bytes.
LIMITS = Limits(
    disconnect_grace_s=5.0,
    session_commands_per_s=20.0,
    session_audio_bytes_per_s=48_000.0,
    key_commands_per_s=30.0,
    rate_burst_s=1.0,
)


def append(seq: int, ms: int = 10) -> pb.ConverseRequest:
    return pb.ConverseRequest(
        client_seq=seq, append_input_audio=pb.AppendInputAudio(audio=pcm16(ms))
    )


def commit(seq: int) -> pb.ConverseRequest:
    return pb.ConverseRequest(
        client_seq=seq,
        commit_input_audio=pb.CommitInputAudio(),
    )


HEARTBEAT = pb.ConverseRequest(heartbeat=pb.Heartbeat())


async def answers(call: grpc.aio.StreamStreamCall, count: int) -> list[pb.ConverseResponse]:
    return [await read(call) for _ in range(count)]


async def test_a_flood_is_refused_typed_and_the_session_goes_on_after_the_wait() -> None:
    clock = FakeClock()
    async with (
        serving(settings(limits=LIMITS), clock=clock) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        flooder, _ = await open_stream(stub)
        bystander, _ = await open_stream(stub)
        for seq in range(1, 31):  # 30 numbered appends; the bucket holds 20
            await flooder.write(append(seq))
        errors = [event.error for event in await answers(flooder, 10)]
        assert [e.client_seq for e in errors] == list(range(21, 31))
        for error in errors:
            assert (error.code, error.type) == ("rate_limit_exceeded", pb.ERROR_TYPE_RATE_LIMIT)
            assert (error.param, error.retryable) == ("commands", True)
            assert error.retry_after.ToMilliseconds() == 50  # one command at 20 a second

        # The other session is untouched, on the same clock.
        await bystander.write(append(1, ms=200))
        await bystander.write(commit(2))
        done = (await read_until(bystander, "response_done"))[-1].response_done.response
        assert done.status == pb.RESPONSE_STATUS_COMPLETED

        # The flooder waits out the hint; its next command (the next number) is applied, and
        # the 20 appends that passed are its turn.
        clock.advance(0.05)
        await flooder.write(commit(31))
        events = await read_until(flooder, "response_done")
        assert "error" not in kinds(events)
        assert events[-1].applied_client_seq == 31
        assert events[-1].response_done.response.status == pb.RESPONSE_STATUS_COMPLETED
        await flooder.done_writing()
        await bystander.done_writing()


async def test_audio_bytes_have_their_own_limit() -> None:
    clock = FakeClock()
    async with (
        serving(settings(limits=LIMITS), clock=clock) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        call, _ = await open_stream(duplex_pb2_grpc.DuplexServiceStub(channel))
        await call.write(append(1, ms=900))  # 43 200 of the 48 000 bytes
        await call.write(append(2, ms=200))  # 9 600 more: 4 800 short, 100 ms at 48 000/s
        error = (await read(call)).error
        assert (error.code, error.param, error.client_seq) == ("rate_limit_exceeded", "audio", 2)
        assert error.retry_after.ToMilliseconds() == 100
        await call.write(HEARTBEAT)  # commands still pass
        assert (await read(call)).WhichOneof("event") == "heartbeat_ack"
        # 100 ms refills the 4 800 bytes the append was short, and a millisecond more the
        # heartbeat's own 2 bytes (every command pays its length on the wire).
        clock.advance(0.101)
        await call.write(append(3, ms=200))
        await call.write(HEARTBEAT)
        assert (await read(call)).WhichOneof("event") == "heartbeat_ack"  # no error before it
        await call.done_writing()


async def test_a_command_made_large_pays_its_bytes_as_audio_does() -> None:
    """A heartbeat carrying a 40 kB event_id costs its sender its length, as 40 kB of audio
    would: the second one in the same instant is refused for rate (it used to pass free)."""
    clock = FakeClock()
    async with (
        serving(settings(limits=LIMITS), clock=clock) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        call, _ = await open_stream(duplex_pb2_grpc.DuplexServiceStub(channel))
        large = pb.ConverseRequest(heartbeat=pb.Heartbeat(), event_id="e" * 40_000)
        await call.write(large)  # 40 000 of the 48 000 bytes
        assert (await read(call)).WhichOneof("event") == "heartbeat_ack"
        await call.write(large)
        error = (await read(call)).error
        assert (error.code, error.param) == ("rate_limit_exceeded", "audio")
        assert "too many bytes (audio and commands)" in error.message
        assert error.event_id == ""  # a 40 kB event_id is not echoed either
        await call.done_writing()


async def test_an_api_key_is_limited_across_its_sessions_and_other_keys_are_not() -> None:
    clock = FakeClock()
    keyed = settings(limits=LIMITS, api_keys=("k1", "k2"))
    async with (
        serving(keyed, clock=clock) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        first, _ = await open_stream(stub, metadata=bearer_metadata("k1"))
        second, _ = await open_stream(stub, metadata=bearer_metadata("k1"))
        other, _ = await open_stream(stub, metadata=bearer_metadata("k2"))
        for _ in range(20):
            await first.write(HEARTBEAT)
        assert set(kinds(await answers(first, 20))) == {"heartbeat_ack"}
        # k1 has 10 of its 30 left: the second session's own 20 do not help past them.
        for _ in range(11):
            await second.write(HEARTBEAT)
        refused = await answers(second, 11)
        assert kinds(refused) == ["heartbeat_ack"] * 10 + ["error"]
        assert refused[-1].error.code == "rate_limit_exceeded"
        # 1/30 s to the next token, hinted as the shortest hint (MIN_RETRY_AFTER_S).
        assert refused[-1].error.retry_after.ToMilliseconds() == 50
        for _ in range(20):
            await other.write(HEARTBEAT)
        assert set(kinds(await answers(other, 20))) == {"heartbeat_ack"}
        for call in (first, second, other):
            await call.done_writing()
