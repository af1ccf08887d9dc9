"""The gRPC side of the benchmarks: the raw echo and our service as child servers, and the
sessions that load them.

* **echo**: a bare grpc.aio bidi stream that writes back every message it reads;
* **ours**: the real service with the loopback engine in ``mirror`` mode, which answers every
  appended chunk at once with an ``output_audio_delta`` of the same audio. Each chunk therefore
  crosses the whole path: gRPC, the session core (validation, numbering, journal), the audio
  edge (24 kHz client audio to the canonical input rate and back), the engine seam and the
  writer. The edge resamples in blocks, so a delta may carry more or less audio than its chunk:
  deltas are matched to appends by count, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import TYPE_CHECKING

import grpc

from omni_grpc.bench import harness
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_OUTPUT_RATE_HZ, pcm16_bytes

if TYPE_CHECKING:
    from omni_grpc.gen.omni.duplex.v1.duplex_pb2_grpc import DuplexServiceAsyncStub
    from omni_grpc.server.settings import ServerSettings

ECHO_METHOD = "/bench.Echo/Stream"
# Clients send OpenAI's default format, pcm16 at 24 kHz, which the edge converts both ways.
CLIENT_RATE_HZ = CANONICAL_OUTPUT_RATE_HZ
KINDS = ("echo", "ours", "recording")


# -- the two servers (child processes) ------------------------------------------------------


async def serve_echo() -> None:
    """A child process's raw echo server, on a free port, until the benchmark goes."""

    async def echo(request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        while (message := await context.read()) is not grpc.aio.EOF:  # type: ignore[attr-defined]
            await context.write(message)

    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(
        echo, request_deserializer=None, response_serializer=None
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Echo", {"Stream": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    harness.announce_ready(port)
    await harness.serve_until_parent_gone()
    await server.stop(0)


def mirror_settings() -> ServerSettings:
    """The benchmarked service: the loopback engine in mirror mode (one chunk in, one out)."""
    from omni_grpc.core import Limits
    from omni_grpc.server.settings import ServerSettings

    return ServerSettings(
        grpc_port=0,
        engine="loopback",
        engine_options={"pace": "fast", "mode": "mirror"},
        # Sessions a step leaves detached (an overloaded step cannot close them all) expire
        # soon, so they do not pile up across the search.
        limits=Limits(max_sessions=10_000, disconnect_grace_s=2.0),
        max_concurrent_streams=8192,
    )


async def serve_ours(record_dir: str | None = None) -> None:
    """A child process's service (:func:`mirror_settings`), until the benchmark goes; with
    ``record_dir``, recording every session there."""
    import dataclasses
    from pathlib import Path

    from omni_grpc.bench import meter
    from omni_grpc.server.app import start_server
    from omni_grpc.server.recording import RecordSettings

    meter.install()
    settings = mirror_settings()
    if record_dir is not None:
        recording = RecordSettings(policy="all", folder=Path(record_dir), max_total_bytes=0)
        settings = dataclasses.replace(settings, recording=recording)
    running = await start_server(settings)
    harness.announce_ready(running.grpc_port)
    await harness.serve_until_parent_gone()
    await running.stop()


# -- load ---------------------------------------------------------------------------------


def append(seq: int, audio: bytes) -> pb.ConverseRequest:
    """One chunk of client audio, as the service gets it."""
    return pb.ConverseRequest(
        client_seq=seq,
        append_input_audio=pb.AppendInputAudio(
            audio=audio, encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=CLIENT_RATE_HZ
        ),
    )


class EchoSession:
    """A stream of the raw echo: every message written comes back as it was."""

    def __init__(self, channel: grpc.aio.Channel, message: bytes) -> None:
        self.channel, self.message = channel, message
        self.sent: deque[float] = deque()

    async def open(self) -> None:
        self.call = self.channel.stream_stream(ECHO_METHOD, None, None)(None)

    async def send(self) -> None:
        await self.call.write(self.message)

    async def read(self, tally: harness.Tally) -> None:
        while (await self.call.read()) is not grpc.aio.EOF:  # type: ignore[attr-defined]
            tally.answer(self.sent)

    async def close(self) -> None:
        self.call.cancel()


class ServiceSession:
    """A session of our service: appends chunks, acknowledges like a real client, then closes."""

    call: grpc.aio.StreamStreamCall[pb.ConverseRequest, pb.ConverseResponse]

    def __init__(self, stub: DuplexServiceAsyncStub, audio: bytes) -> None:
        self.stub, self.audio = stub, audio
        self.sent: deque[float] = deque()
        self.seq = 0
        self.ack = 0  # the event seq to acknowledge with the next chunk

    async def open(self) -> None:
        self.call = self.stub.Converse(None)  # None: requests go by call.write()
        await self.call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
        first = await self.call.read()
        if not isinstance(first, pb.ConverseResponse) or not first.HasField("session_created"):
            raise SystemExit(f"the service answered the open with {first}")

    async def send(self) -> None:
        if self.ack:  # from here: grpc.aio allows one write at a time, and the pacer writes
            await self.call.write(pb.ConverseRequest(ack_events=pb.AckEvents(seq=self.ack)))
            self.ack = 0
        self.seq += 1
        await self.call.write(append(self.seq, self.audio))

    async def read(self, tally: harness.Tally) -> None:
        while isinstance(event := await self.call.read(), pb.ConverseResponse):
            kind = event.WhichOneof("event")
            if kind == "output_audio_delta":
                tally.answer(self.sent)
                if event.seq % harness.ACK_EVERY == 0:
                    self.ack = event.seq
            elif kind == "error":
                tally.errors.append(f"{event.error.code}: {event.error.message}")

    async def close(self) -> None:
        self.seq += 1
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            close = pb.ConverseRequest(client_seq=self.seq, close_session=pb.CloseSession())
            await self.call.write(close)
        self.call.cancel()


class Load(harness.PacedLoad):
    """Paced steps of gRPC streams against one server: the raw echo's when ``kind`` is "echo",
    our service's under any other name."""

    async def step(self, sessions: int, chunk_ms: int, duration_s: float) -> harness.Tally:
        audio = self.rng.randbytes(pcm16_bytes(chunk_ms, CLIENT_RATE_HZ))
        # All streams on one channel, as the bridge does.
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            group: list[harness.LoadSession]
            if self.kind == "echo":
                message = append(1, audio).SerializeToString()
                group = [EchoSession(channel, message) for _ in range(sessions)]
            else:
                stub: DuplexServiceAsyncStub = duplex_pb2_grpc.DuplexServiceStub(channel)
                group = [ServiceSession(stub, audio) for _ in range(sessions)]
            return await self.paced(group, chunk_ms, duration_s)
