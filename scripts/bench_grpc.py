#!/usr/bin/env python3
"""Benchmark: our gRPC service against a raw grpc.aio echo, side by side, in one run.

Both servers run as child processes (pinned to CPU 0 where the machine allows) and are driven
by the same load generator here (pinned to CPU 1), with the same message sizes and pacing:

* **raw echo**: a bare grpc.aio bidi stream that writes back every message it reads;
* **ours**: the real service with the loopback engine in ``mirror`` mode, which answers every
  appended chunk at once with an ``output_audio_delta`` of the same audio. Each chunk therefore
  crosses the whole path: gRPC, the session core (validation, numbering, journal), the audio
  edge (24 kHz client audio to the canonical 16 kHz and back), the engine seam and the writer.

Reported: sessions sustained with p99 chunk round trip under 50 ms (20 ms and 100 ms chunks) and
the ratio to raw echo, the latency our service adds per hop (p50/p99 at one session), resume
latency (new stream → first replayed event), and server memory per idle session.

    scripts/bench_grpc.py            # full run, about 2 to 4 minutes
    scripts/bench_grpc.py --quick    # a smoke run of a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.wire import pb

P99_LIMIT_MS = 50.0
ECHO_METHOD = "/bench.Echo/Stream"


def _pin(cpu: int) -> None:
    with contextlib.suppress(AttributeError, OSError):
        if os.cpu_count() and os.cpu_count() > cpu:  # type: ignore[operator]
            os.sched_setaffinity(0, {cpu})


# -- the two servers (child processes) ------------------------------------------------------


async def _serve_echo(port: int) -> None:
    async def echo(request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        while (message := await context.read()) is not grpc.aio.EOF:
            await context.write(message)

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "bench.Echo",
                {
                    "Stream": grpc.stream_stream_rpc_method_handler(
                        echo, request_deserializer=None, response_serializer=None
                    )
                },
            ),
        )
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


async def _serve_ours(port: int) -> None:
    from omni_grpc.core import Limits
    from omni_grpc.server.app import start_server
    from omni_grpc.server.settings import ServerSettings

    settings = ServerSettings(
        grpc_port=port,
        http_port=None,
        engine="loopback",
        engine_options={"pace": "fast", "mode": "mirror"},
        limits=Limits(max_sessions=4000),
    )
    running = await start_server(settings)
    print("ready", flush=True)
    await running.server.wait_for_termination()


def _child(kind: str, port: int) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, __file__, f"--serve-{kind}", str(port)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise SystemExit(f"the {kind} server did not start")
    return process


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- load ---------------------------------------------------------------------------------


@dataclass
class Result:
    sessions: int
    sent: int
    received: int
    rtts_ms: list[float]

    @property
    def p50(self) -> float:
        return statistics.median(self.rtts_ms) if self.rtts_ms else float("inf")

    @property
    def p99(self) -> float:
        if len(self.rtts_ms) < 2:
            return float("inf")
        return statistics.quantiles(self.rtts_ms, n=100)[98]

    @property
    def kept_up(self) -> bool:
        return self.received >= 0.99 * self.sent and self.p99 < P99_LIMIT_MS


def _append(seq: int, audio: bytes) -> pb.ConverseRequest:
    return pb.ConverseRequest(
        client_seq=seq,
        append_input_audio=pb.AppendInputAudio(
            audio=audio, encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=24000
        ),
    )


async def _echo_session(
    channel: grpc.aio.Channel,
    audio: bytes,
    period_s: float,
    duration_s: float,
    rtts: list[float],
    counts: list[int],
) -> None:
    call = channel.stream_stream(ECHO_METHOD)()
    sent: deque[float] = deque()

    async def reader() -> None:
        while (await call.read()) is not grpc.aio.EOF:
            rtts.append((time.perf_counter() - sent.popleft()) * 1000)
            counts[1] += 1

    task = asyncio.create_task(reader())
    await _paced(
        lambda seq: call.write(_append(seq, audio).SerializeToString()),
        sent,
        period_s,
        duration_s,
        counts,
    )
    await asyncio.sleep(min(1.0, period_s * 5))
    task.cancel()
    call.cancel()


async def _our_session(
    stub: duplex_pb2_grpc.DuplexServiceStub,
    audio: bytes,
    period_s: float,
    duration_s: float,
    rtts: list[float],
    counts: list[int],
) -> None:
    call = stub.Converse()
    await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
    await call.read()  # session_created
    sent: deque[float] = deque()
    to_ack = [0]  # a call takes one write at a time, so the writer sends the acks

    async def reader() -> None:
        while (event := await call.read()) is not grpc.aio.EOF:
            if event.WhichOneof("event") == "output_audio_delta":
                rtts.append((time.perf_counter() - sent.popleft()) * 1000)
                counts[1] += 1
                if event.seq % 50 == 0:  # acknowledge like a real client, so journals trim
                    to_ack[0] = event.seq

    async def write(seq: int) -> None:
        if to_ack[0]:
            await call.write(pb.ConverseRequest(ack_events=pb.AckEvents(seq=to_ack[0])))
            to_ack[0] = 0
        await call.write(_append(seq, audio))

    task = asyncio.create_task(reader())
    await _paced(write, sent, period_s, duration_s, counts)
    await asyncio.sleep(min(1.0, period_s * 5))
    task.cancel()
    call.cancel()


async def _paced(
    write: object, sent: deque[float], period_s: float, duration_s: float, counts: list[int]
) -> None:
    start = time.perf_counter() + period_s * (hash(id(sent)) % 1000) / 1000  # spread phases
    n = 0
    while (now := time.perf_counter()) - start < duration_s:
        target = start + n * period_s
        if target > now:
            await asyncio.sleep(target - now)
        sent.append(time.perf_counter())
        await write(n + 1)  # type: ignore[operator]
        counts[0] += 1
        n += 1


async def run_load(kind: str, port: int, sessions: int, chunk_ms: int, duration_s: float) -> Result:
    audio = bytes(24000 * 2 * chunk_ms // 1000)
    rtts: list[float] = []
    counts = [0, 0]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        if kind == "echo":
            jobs = [
                _echo_session(channel, audio, chunk_ms / 1000, duration_s, rtts, counts)
                for _ in range(sessions)
            ]
        else:
            stub = duplex_pb2_grpc.DuplexServiceStub(channel)
            jobs = [
                _our_session(stub, audio, chunk_ms / 1000, duration_s, rtts, counts)
                for _ in range(sessions)
            ]
        await asyncio.gather(*jobs)
    warm = rtts[len(rtts) // 10 :]  # drop the ramp-up
    return Result(sessions, counts[0], counts[1], warm)


async def capacity(
    kind: str, port: int, chunk_ms: int, ladder: list[int], duration_s: float
) -> tuple[int, Result | None]:
    best, best_result = 0, None
    for sessions in ladder:
        result = await run_load(kind, port, sessions, chunk_ms, duration_s)
        print(
            f"  {kind:5} {chunk_ms:3} ms x {sessions:4}: p50 {result.p50:6.2f} ms  "
            f"p99 {result.p99:7.2f} ms  got {result.received}/{result.sent}",
            flush=True,
        )
        if not result.kept_up:
            break
        best, best_result = sessions, result
    return best, best_result


# -- resume and memory ---------------------------------------------------------------------


async def resume_latency(port: int, rounds: int) -> list[float]:
    times = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        for _ in range(rounds):
            call = stub.Converse()
            await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
            created = (await call.read()).session_created
            await call.write(_append(1, bytes(960)))
            await call.read()  # the mirrored chunk, seq 1
            call.cancel()
            start = time.perf_counter()
            again = stub.Converse()
            await again.write(
                pb.ConverseRequest(
                    resume_session=pb.ResumeSession(
                        session_id=created.session.id, resume_token=created.resume_token
                    )
                )
            )
            await again.read()  # session_resumed
            replayed = await again.read()
            assert replayed.seq == 1
            times.append((time.perf_counter() - start) * 1000)
            await again.write(pb.ConverseRequest(client_seq=2, close_session=pb.CloseSession()))
            again.cancel()
    return times


async def idle_memory_kib(port: int, pid: int, count: int) -> float:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        calls = []
        for _ in range(10):  # warm allocator and code paths first
            call = stub.Converse()
            await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
            await call.read()
            calls.append(call)
        await asyncio.sleep(0.5)
        before = _rss_kib(pid)
        for _ in range(count):
            call = stub.Converse()
            await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
            await call.read()
            calls.append(call)
        await asyncio.sleep(0.5)
        after = _rss_kib(pid)
        for call in calls:
            call.cancel()
    return (after - before) / count


# -- main ---------------------------------------------------------------------------------


async def bench(quick: bool) -> None:
    _pin(1)
    echo_port, our_port = _free_port(), _free_port()
    echo, ours = _child("echo", echo_port), _child("ours", our_port)
    duration = 1.5 if quick else 4.0
    ladders = {
        20: [10, 25] if quick else [25, 50, 75, 100, 125, 150, 200],
        100: [25, 50] if quick else [50, 100, 200, 300, 400, 500, 600],
    }
    try:
        print("one session, 20 ms chunks:")
        base = await run_load("echo", echo_port, 1, 20, duration)
        mine = await run_load("ours", our_port, 1, 20, duration)
        # Server CPU per chunk at a load both keep up with: the figure noise disturbs least.
        cpu_us = {}
        for kind, child, port in (("echo", echo, echo_port), ("ours", ours, our_port)):
            before = _cpu_s(child.pid)
            load = await run_load(kind, port, 10, 20, duration)
            cpu_us[kind] = (_cpu_s(child.pid) - before) * 1e6 / max(load.received, 1)
        caps: dict[tuple[str, int], int] = {}
        for chunk_ms, ladder in ladders.items():
            print(f"capacity, {chunk_ms} ms chunks:")
            for kind, port in (("echo", echo_port), ("ours", our_port)):
                caps[(kind, chunk_ms)], _ = await capacity(kind, port, chunk_ms, ladder, duration)
        resumes = await resume_latency(our_port, 10 if quick else 50)
        idle_kib = await idle_memory_kib(our_port, ours.pid, 50 if quick else 500)
    finally:
        for child in (echo, ours):
            child.terminate()
            child.wait(5)
    print()
    print("| measure | raw echo | ours | ratio / added | target | met |")
    print("|---|---|---|---|---|---|")
    for chunk_ms in ladders:
        e, o = caps[("echo", chunk_ms)], caps[("ours", chunk_ms)]
        ratio = o / e if e else 0.0
        ceiling = " (ladder top)" if o == ladders[chunk_ms][-1] else ""
        print(
            f"| paced sessions, p99 < 50 ms, {chunk_ms} ms chunks | {e} | {o}{ceiling} | "
            f"{ratio:.2f}x | >= 0.8x | {'yes' if ratio >= 0.8 else 'no'} |"
        )
    print(
        f"| server CPU per chunk (10 sessions, 20 ms) | {cpu_us['echo']:.0f} us | "
        f"{cpu_us['ours']:.0f} us | {cpu_us['ours'] / cpu_us['echo']:.1f}x | - | - |"
    )
    added50, added99 = mine.p50 - base.p50, mine.p99 - base.p99
    print(
        f"| chunk round trip p50, 1 session | {base.p50:.2f} ms | {mine.p50:.2f} ms | "
        f"+{added50:.2f} ms | <= 1 ms added | {'yes' if added50 <= 1 else 'no'} |"
    )
    print(
        f"| chunk round trip p99, 1 session | {base.p99:.2f} ms | {mine.p99:.2f} ms | "
        f"+{added99:.2f} ms | - | - |"
    )
    r50 = statistics.median(resumes)
    print(
        f"| resume: new stream to first replayed event, p50 | - | {r50:.2f} ms | - | "
        f"<= 5 ms | {'yes' if r50 <= 5 else 'no'} |"
    )
    print(
        f"| server memory per idle session | - | {idle_kib:.1f} KiB | - | <= 64 KiB | "
        f"{'yes' if idle_kib <= 64 else 'no'} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--serve-echo", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-ours", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio works too
        uvloop = None
    runner = uvloop.run if uvloop else asyncio.run
    if args.serve_echo or args.serve_ours:
        _pin(0)
        runner(_serve_echo(args.serve_echo) if args.serve_echo else _serve_ours(args.serve_ours))
    else:
        runner(bench(args.quick))


if __name__ == "__main__":
    main()
