"""The server-wide memory budget on a real server: appends past it are refused, typed and
retryable, other sessions go on, and commits, clears and endings give the bytes back; each
session's share is counted in the canonical bytes the engine keeps."""

from __future__ import annotations

import dataclasses

import grpc

from omni_grpc.core import Limits
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT, SUPPORTED_RATES_HZ
from tests.server.streams import open_stream, read_until
from tests.serving import eventually, serving, settings

BUDGET = 100_000  # bytes; canonical input, so the appends below count byte for byte
CLIENT_COMMITS = pb.SessionConfig(
    turn_detection=pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_NONE),
    input_audio_format=CANONICAL_INPUT,
)


class Stream:
    """One raw Converse stream that numbers its commands."""

    def __init__(self, call: grpc.aio.StreamStreamCall, session_id: str) -> None:
        self.call = call
        self.session_id = session_id
        self.seq = 0

    async def send(self, **command: object) -> int:
        self.seq += 1
        await self.call.write(pb.ConverseRequest(client_seq=self.seq, **command))  # type: ignore[arg-type]
        return self.seq

    async def append(self, size: int) -> pb.ErrorReport | None:
        """Appends ``size`` bytes of quiet audio; the error it got, or None once a heartbeat
        sent after it came back without one."""
        seq = await self.send(append_input_audio=pb.AppendInputAudio(audio=bytes(size)))
        await self.send(heartbeat=pb.Heartbeat())
        error = None
        for event in await read_until(self.call, "heartbeat_ack"):
            if event.WhichOneof("event") == "error" and event.error.client_seq == seq:
                error = event.error
        return error


async def _open(
    stub: duplex_pb2_grpc.DuplexServiceStub, config: pb.SessionConfig = CLIENT_COMMITS
) -> Stream:
    call, created = await open_stream(stub, config)
    return Stream(call, created.session.id)


def _input_held(server: RunningServer, stream: Stream) -> int:
    host = next(h for h in server.sessions if h.session.id == stream.session_id)
    return host.session.admission.pending_input_bytes


async def test_appends_past_the_budget_are_refused_and_the_budget_comes_back() -> None:
    limits = Limits(disconnect_grace_s=5.0, memory_budget_bytes=BUDGET)
    async with (
        serving(dataclasses.replace(settings(), limits=limits)) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        first, second = await _open(stub), await _open(stub)

        assert await first.append(60_000) is None
        assert _input_held(server, first) == 60_000

        refused = await second.append(60_000)
        assert refused is not None
        assert refused.code == "input_backpressure"
        assert refused.type == pb.ERROR_TYPE_RATE_LIMIT
        assert refused.retryable and refused.retry_after.ToMilliseconds() > 0
        assert _input_held(server, second) == 0
        # The refused session goes on: what fits is taken.
        assert await second.append(20_000) is None

        # A commit gives the first session's input back, and its answer, once read, its
        # output: the refused append now fits.
        await first.send(commit_input_audio=pb.CommitInputAudio())
        await read_until(first.call, "input_committed")
        assert _input_held(server, first) == 0
        await read_until(first.call, "response_done")
        assert await second.append(60_000) is None
        assert _input_held(server, second) == 80_000

        # A clear gives it back too.
        await second.send(clear_input_audio=pb.ClearInputAudio())
        await read_until(second.call, "input_cleared")
        assert _input_held(server, second) == 0

        # And so does the end of a session, with the output it never sent.
        assert await first.append(90_000) is None
        await first.send(close_session=pb.CloseSession())
        await read_until(first.call, "session_closed")
        await eventually(lambda: server.sessions.budget.held == 0)
        second.call.cancel()


async def test_a_session_share_counts_the_canonical_bytes_the_engine_keeps() -> None:
    # 8 kHz G.711 grows fourfold on its way to 16 kHz pcm16: the core's cap (wire bytes) lets
    # 16 000 bytes through, the session's share of the budget (canonical bytes) does not.
    limits = Limits(disconnect_grace_s=5.0, max_pending_input_bytes=40_000)
    ulaw = pb.AudioFormat(
        encoding=pb.AUDIO_ENCODING_G711_ULAW, sample_rate_hz=min(SUPPORTED_RATES_HZ)
    )
    config = pb.SessionConfig(turn_detection=CLIENT_COMMITS.turn_detection, input_audio_format=ulaw)
    async with (
        serving(dataclasses.replace(settings(), limits=limits)) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        stream = await _open(duplex_pb2_grpc.DuplexServiceStub(channel), config)
        refused = await stream.append(16_000)
        assert refused is not None and refused.code == "input_backpressure" and refused.retryable
        assert _input_held(server, stream) == 0
        assert await stream.append(8_000) is None
        assert _input_held(server, stream) == 32_000
        stream.call.cancel()
