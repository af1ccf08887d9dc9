#!/usr/bin/env python3
"""Benchmark: the websocket bridge against a raw aiohttp websocket echo, side by side, in one run.

Both servers run as child processes (pinned to CPU 0 where the machine allows) and are driven by
the same load generator here (pinned to CPU 1), with the same frames and pacing: each session
sends an ``input_audio_buffer.append`` event (JSON, pcm16 at 24 kHz in base64) every chunk and
times the answer to it.

* **raw**: a bare aiohttp websocket server that parses each frame with orjson, decodes the
  base64 audio and answers with a ``response.output_audio.delta`` frame of the same audio;
* **bridge**: the real service as ``omni-grpc serve`` runs it (bridge and gRPC service in one
  process) with the loopback engine in ``mirror`` mode. Each chunk crosses the whole path:
  websocket JSON and base64, the bridge, gRPC, the session core, the audio edge, the engine,
  and back as one ``response.output_audio.delta``;
* **gRPC**: the same process driven over gRPC directly (as ``scripts/bench_grpc.py`` does), so
  the difference to **bridge** is what the bridge hop adds.

The audio edge resamples 24 kHz to 16 kHz and back in blocks, so a delta may carry more or less
audio than its chunk (some are empty): deltas are matched to appends by count, in order.

Reported: sessions sustained with p99 chunk round trip under 50 ms (20 ms and 100 ms chunks) and
the bridge's ratio to raw, and the latency each hop adds at one session (p50/p99).

    scripts/bench_bridge.py            # full run, about 3 to 4 minutes
    scripts/bench_bridge.py --quick    # a smoke run of a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp
import grpc
import orjson
import uvloop
from aiohttp import WSMsgType, web

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.wire import pb

if TYPE_CHECKING:
    from omni_grpc.gen.omni.duplex.v1.duplex_pb2_grpc import DuplexServiceAsyncStub

P99_LIMIT_MS = 50.0
TARGET_RATIO = 0.6
RATE_HZ = 24000
DELTA = "response.output_audio.delta"
KINDS = ("raw", "grpc", "bridge")
ACK_EVERY = 50  # acknowledge like a real client (with the next chunk), so journals trim


def _pin(cpu: int) -> None:
    with contextlib.suppress(AttributeError, OSError):
        if os.cpu_count() and os.cpu_count() > cpu:  # type: ignore[operator]
            os.sched_setaffinity(0, {cpu})


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the two servers (child processes) ------------------------------------------------------

# The fields of the bridge's own delta, so both answers weigh the same.
_RAW_ANSWER = {"type": DELTA, "response_id": "resp_bench", "item_id": "", "output_index": 0}
_RAW_ANSWER.update(content_index=0, start_ms=0.0)


async def _serve_raw() -> None:
    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(compress=False, max_msg_size=16 * 1024 * 1024)
        await ws.prepare(request)
        n = 0
        async for message in ws:
            if message.type is not WSMsgType.TEXT:
                continue
            event = orjson.loads(message.data)
            audio = binascii.a2b_base64(event["audio"], strict_mode=True)
            n += 1
            b64 = binascii.b2a_base64(audio, newline=False).decode("ascii")
            duration_ms = len(audio) / 2 * 1000 / RATE_HZ
            answer = {**_RAW_ANSWER, "delta": b64, "duration_ms": duration_ms}
            answer.update(event_id=f"event_bench_{n}_0", server_event_seq=n)
            await ws.send_frame(orjson.dumps(answer), WSMsgType.TEXT)
        return ws

    app = web.Application()
    app.router.add_get("/v1/realtime", echo)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    print(f"ready {runner.addresses[0][1]}", flush=True)
    await _parent_gone()


async def _serve_ours() -> None:
    from omni_grpc.core import Limits
    from omni_grpc.server.app import start_server
    from omni_grpc.server.settings import ServerSettings

    settings = ServerSettings(
        grpc_port=0,
        http_port=0,
        engine="loopback",
        engine_options={"pace": "fast", "mode": "mirror"},
        # Sessions a step leaves detached (an overloaded step cannot close them all) expire
        # soon, so they do not pile up across the ladder.
        limits=Limits(max_sessions=10_000, disconnect_grace_s=2.0),
        max_concurrent_streams=8192,
    )
    running = await start_server(settings)
    print(f"ready {running.grpc_port} {running.http_port}", flush=True)
    await _parent_gone()
    await running.stop(0)


async def _parent_gone() -> None:
    """Returns when the benchmark's end of our stdin closes, even if it was killed."""
    await asyncio.to_thread(sys.stdin.read)


def _child(kind: str) -> tuple[subprocess.Popen[str], list[int]]:
    process = subprocess.Popen(
        [sys.executable, __file__, f"--serve-{kind}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        # A session of its own puts the server in its own scheduler autogroup, so on a shared
        # machine it gets a fair share of its CPU instead of splitting ours.
        start_new_session=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().split()
    if not line or line[0] != "ready":
        raise SystemExit(f"the {kind} server did not start")
    return process, [int(port) for port in line[1:]]


# -- load ---------------------------------------------------------------------------------


@dataclass
class Tally:
    """What one load step saw, over all its sessions."""

    sessions: int
    warm_from: float = float("inf")  # answers to chunks sent before this are ramp-up
    sent: int = 0
    received: int = 0
    rtts_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    client_cpu: float = 0.0  # share of one core over the paced window
    server_cpu: float = 0.0
    done_sending: bool = False
    drained: asyncio.Event = field(default_factory=asyncio.Event)

    def check_drained(self) -> None:
        if self.done_sending and self.received >= self.sent:
            self.drained.set()

    def answer(self, sent: deque[float]) -> None:
        """Books one answer against the oldest unanswered chunk of its session."""
        if not sent:
            self.errors.append("an answer to no chunk")
            return
        t0 = sent.popleft()
        self.received += 1
        if t0 >= self.warm_from:
            self.rtts_ms.append((time.perf_counter() - t0) * 1000)
        self.check_drained()

    @property
    def p50(self) -> float:
        return statistics.median(self.rtts_ms) if self.rtts_ms else float("inf")

    @property
    def p99(self) -> float:
        return statistics.quantiles(self.rtts_ms, n=100)[98] if self.rtts_ms[1:] else float("inf")

    @property
    def kept_up(self) -> bool:
        return not self.errors and self.received >= 0.99 * self.sent and self.p99 < P99_LIMIT_MS


class Session:
    """One client session: ``open``, then ``send`` chunks while ``read`` books the answers."""

    sent: deque[float]

    async def open(self) -> None: ...
    async def send(self) -> None: ...
    async def read(self, tally: Tally) -> None: ...
    async def close(self) -> None: ...


class WsSession(Session):
    def __init__(self, http: aiohttp.ClientSession, url: str, frame: bytes, bridge: bool) -> None:
        self.http, self.url, self.frame, self.bridge = http, url, frame, bridge
        self.sent = deque()
        self.ack = 0  # the server_event_seq to acknowledge with the next chunk
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    async def open(self) -> None:
        self.ws = await self.http.ws_connect(
            self.url, max_msg_size=0, timeout=aiohttp.ClientWSTimeout(ws_close=2.0)
        )
        if self.bridge:  # the session opens on connect (?model=); wait until it has
            first = orjson.loads((await self.ws.receive()).data)
            if first.get("type") != "session.created":
                raise SystemExit(f"the bridge answered the connect with {first}")

    async def send(self) -> None:
        assert self.ws is not None
        if self.ack:
            ack = {"type": "session.event_ack", "server_event_seq": self.ack}
            self.ack = 0
            await self.ws.send_frame(orjson.dumps(ack), WSMsgType.TEXT)
        await self.ws.send_frame(self.frame, WSMsgType.TEXT)

    async def read(self, tally: Tally) -> None:
        assert self.ws is not None
        async for message in self.ws:
            if message.type is not WSMsgType.TEXT:
                break
            event = orjson.loads(message.data)
            kind = event["type"]
            if kind == DELTA:
                tally.answer(self.sent)
                seq = event.get("server_event_seq", 0)
                if self.bridge and seq % ACK_EVERY == 0:
                    self.ack = seq
            elif kind == "error":
                tally.errors.append(str(event.get("error")))

    async def close(self) -> None:
        assert self.ws is not None
        if self.bridge and not self.ws.closed:
            # Close the session, not just the socket: a dropped socket leaves it resumable.
            with contextlib.suppress(ConnectionError):
                await self.ws.send_frame(b'{"type":"session.close"}', WSMsgType.TEXT)
        await self.ws.close()


class GrpcSession(Session):
    call: grpc.aio.StreamStreamCall[pb.ConverseRequest, pb.ConverseResponse]

    def __init__(self, stub: DuplexServiceAsyncStub, audio: bytes) -> None:
        self.stub, self.audio = stub, audio
        self.sent = deque()
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
        append = pb.AppendInputAudio(
            audio=self.audio, encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=RATE_HZ
        )
        await self.call.write(pb.ConverseRequest(client_seq=self.seq, append_input_audio=append))

    async def read(self, tally: Tally) -> None:
        while isinstance(event := await self.call.read(), pb.ConverseResponse):
            kind = event.WhichOneof("event")
            if kind == "output_audio_delta":
                tally.answer(self.sent)
                if event.seq % ACK_EVERY == 0:
                    self.ack = event.seq
            elif kind == "error":
                tally.errors.append(f"{event.error.code}: {event.error.message}")

    async def close(self) -> None:
        self.seq += 1
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            close = pb.ConverseRequest(client_seq=self.seq, close_session=pb.CloseSession())
            await self.call.write(close)
        self.call.cancel()


async def _paced(
    session: Session, tally: Tally, start: float, period_s: float, duration_s: float
) -> None:
    n = 0
    while (target := start + n * period_s) < start + duration_s:
        now = time.perf_counter()
        if target > now:
            await asyncio.sleep(target - now)
        session.sent.append(time.perf_counter())
        await session.send()
        tally.sent += 1
        n += 1


class Load:
    """Runs paced steps against one server; ``kind`` is one of KINDS."""

    def __init__(self, kind: str, port: int, server_pid: int) -> None:
        self.kind, self.port, self.server_pid = kind, port, server_pid
        self.rng = random.Random(0)

    async def step(self, sessions: int, chunk_ms: int, duration_s: float) -> Tally:
        audio = self.rng.randbytes(RATE_HZ * 2 * chunk_ms // 1000)
        frame = orjson.dumps(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode()}
        )
        if self.kind == "grpc":
            # All streams on one channel, as scripts/bench_grpc.py and the bridge itself do.
            async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
                stub: DuplexServiceAsyncStub = duplex_pb2_grpc.DuplexServiceStub(channel)
                group: list[Session] = [GrpcSession(stub, audio) for _ in range(sessions)]
                return await self._drive(group, chunk_ms / 1000, duration_s)
        url = f"http://127.0.0.1:{self.port}/v1/realtime?model=loopback"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            bridge = self.kind == "bridge"
            group = [WsSession(http, url, frame, bridge) for _ in range(sessions)]
            return await self._drive(group, chunk_ms / 1000, duration_s)

    async def _drive(self, group: list[Session], period_s: float, duration_s: float) -> Tally:
        gate = asyncio.Semaphore(64)  # connect in waves, not one burst of thousands

        async def opened(session: Session) -> None:
            async with gate:
                await session.open()

        await asyncio.gather(*(opened(session) for session in group))
        tally = Tally(len(group))
        readers = [asyncio.create_task(session.read(tally)) for session in group]
        start = time.perf_counter() + 0.05
        # Ramp-up (first chunks of every session, phases settling) is not measured.
        tally.warm_from = start + min(0.5, duration_s / 4) + period_s
        cpu0, server0 = _own_cpu_s(), _cpu_s(self.server_pid)
        phases = [start + period_s * self.rng.random() for _ in group]
        await asyncio.gather(
            *(_paced(s, tally, t, period_s, duration_s) for s, t in zip(group, phases, strict=True))
        )
        window = time.perf_counter() - start
        tally.client_cpu = (_own_cpu_s() - cpu0) / window
        tally.server_cpu = (_cpu_s(self.server_pid) - server0) / window
        tally.done_sending = True
        tally.check_drained()
        with contextlib.suppress(TimeoutError):  # answers still in flight may land
            await asyncio.wait_for(tally.drained.wait(), 1.0)
        for reader in readers:  # a reader that died before the end is a broken path
            if reader.done() and not reader.cancelled() and reader.exception():
                tally.errors.append(f"reader failed: {reader.exception()!r}")
        await asyncio.gather(*(session.close() for session in group), return_exceptions=True)
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        return tally


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


@dataclass
class Capacity:
    sessions: int = 0  # the most sessions kept up
    at_top: bool = False  # the search never failed: the server may hold more
    client_bound: bool = False  # the load generator was saturated in the step that failed
    # Server CPU per chunk at the largest step kept up (if none, the first). Unlike latency,
    # which swings with whatever else runs on the machine, it barely moves: a projection.
    us_per_chunk: float = float("nan")

    def per_core(self, chunk_ms: int) -> float:
        """Sessions that would take 70% of one core (where tails stay short), by CPU alone."""
        return 0.7e6 / (self.us_per_chunk * 1000 / chunk_ms) if self.us_per_chunk else 0.0


async def _settle(pid: int, limit_s: float = 10.0) -> None:
    """Waits until the server has worked off what a failed step left queued."""
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        before = _cpu_s(pid)
        await asyncio.sleep(0.25)
        if _cpu_s(pid) - before < 0.25 * 0.1:
            return


async def capacity(
    load: Load, chunk_ms: int, start: int, top: int, duration_s: float, refine: int
) -> Capacity:
    """The most sessions kept up: doubling from ``start`` up to ``top``, then bisecting."""
    cap = Capacity()

    async def ok(sessions: int) -> bool:
        await _settle(load.server_pid)
        result = await load.step(sessions, chunk_ms, duration_s)
        print(
            f"  {load.kind:6} {chunk_ms:3} ms x {sessions:4}: p50 {result.p50:7.2f} ms  "
            f"p99 {result.p99:8.2f} ms  got {result.received}/{result.sent}  "
            f"cpu server {result.server_cpu:4.0%} client {result.client_cpu:4.0%}"
            + (f"  errors {len(result.errors)}: {result.errors[0]}" if result.errors else ""),
            flush=True,
        )
        if result.kept_up or math.isnan(cap.us_per_chunk):  # else the first step's figure
            cap.us_per_chunk = result.server_cpu * 1e6 / (sessions * 1000 / chunk_ms)
        if not result.kept_up:
            cap.client_bound = result.client_cpu >= 0.9
        return result.kept_up

    passed, failed = 0, None
    while failed is None and passed < top:
        sessions = min(max(passed * 2, start), top)
        passed, failed = (sessions, None) if await ok(sessions) else (passed, sessions)
    for _ in range(refine):  # bisect between the last pass and the first failure
        if failed is None or failed - passed <= max(1, passed // 10):
            break
        sessions = (passed + failed) // 2
        passed, failed = (sessions, failed) if await ok(sessions) else (passed, sessions)
    cap.sessions, cap.at_top = passed, failed is None
    return cap


# -- main ---------------------------------------------------------------------------------


async def bench(quick: bool) -> int:
    _pin(1)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # thousands of sockets
    raw, (raw_port,) = _child("raw")
    ours, (grpc_port, http_port) = _child("ours")
    loads = [
        Load("raw", raw_port, raw.pid),
        Load("grpc", grpc_port, ours.pid),
        Load("bridge", http_port, ours.pid),
    ]
    # Each search starts near the capacity measured before, to save steps; (start, top) by kind.
    searches = {
        20: {"raw": (80, 640), "grpc": (16, 640), "bridge": (8, 640)},
        100: {"raw": (320, 1280), "grpc": (80, 1280), "bridge": (40, 1280)},
    }
    if quick:  # one step per kind and chunk size
        searches = {chunk: dict.fromkeys(KINDS, (4, 4)) for chunk in searches}
    load_before = os.getloadavg()
    single: dict[str, Tally] = {}
    caps: dict[tuple[str, int], Capacity] = {}
    try:
        print("one session, 20 ms chunks:")
        for load in loads:
            single[load.kind] = one = await load.step(1, 20, 1.0 if quick else 5.0)
            print(
                f"  {load.kind:6}: p50 {one.p50:6.2f} ms  p99 {one.p99:6.2f} ms  "
                f"got {one.received}/{one.sent}",
                flush=True,
            )
        for chunk_ms, search in searches.items():
            print(f"capacity, {chunk_ms} ms chunks:", flush=True)
            for load in loads:
                start, top = search[load.kind]
                caps[(load.kind, chunk_ms)] = await capacity(
                    load, chunk_ms, start, top, 1.0 if quick else 3.0, refine=0 if quick else 3
                )
    finally:
        for child in (raw, ours):
            child.terminate()
            child.wait(5)

    def cell(kind: str, chunk_ms: int) -> str:
        cap = caps[(kind, chunk_ms)]
        note = " (ladder top)" if cap.at_top else " (client-bound)" if cap.client_bound else ""
        return f"{cap.sessions}{note}"

    print("\n| measure | raw ws echo | ours, gRPC | ours, bridge | bridge / raw | target | met |")
    print("|---|---|---|---|---|---|---|")
    for chunk_ms in searches:
        r, b = caps[("raw", chunk_ms)].sessions, caps[("bridge", chunk_ms)].sessions
        ratio = b / r if r else 0.0
        # A quick run's one step per kind measures nothing about capacity.
        met = "n/a (quick)" if quick else "yes" if ratio >= TARGET_RATIO else "no"
        print(
            f"| paced sessions, p99 < 50 ms, {chunk_ms} ms chunks | {cell('raw', chunk_ms)} | "
            f"{cell('grpc', chunk_ms)} | {cell('bridge', chunk_ms)} | {ratio:.2f}x | "
            f">= {TARGET_RATIO}x | {met} |"
        )
    for chunk_ms in searches:
        costs = [caps[(kind, chunk_ms)] for kind in KINDS]
        ratio = costs[0].us_per_chunk / costs[2].us_per_chunk if costs[2].us_per_chunk else 0.0
        print(
            f"| server CPU per chunk, {chunk_ms} ms chunks (sessions per core at 70% CPU) | "
            + " | ".join(f"{c.us_per_chunk:.0f} us ({c.per_core(chunk_ms):.0f})" for c in costs)
            + f" | {ratio:.2f}x | - | - |"
        )
    quantiles = {name: [getattr(single[kind], name) for kind in KINDS] for name in ("p50", "p99")}
    for name, (r, g, b) in quantiles.items():
        print(
            f"| chunk round trip {name}, 1 session, 20 ms | {r:.2f} ms | {g:.2f} ms | "
            f"{b:.2f} ms | {b - r:+.2f} ms | - | - |"
        )
    for name, (_, g, b) in quantiles.items():
        print(
            f"| added by the bridge hop (bridge - gRPC), {name}, 1 session | - | - | "
            f"{b - g:+.2f} ms | - | - | - |"
        )
    loadavg = " / ".join(f"{a:.2f} {b:.2f} {c:.2f}" for a, b, c in (load_before, os.getloadavg()))
    print(f"\nload average (1, 5, 15 min) before / after: {loadavg}")
    # A single session must get every chunk back: anything else is a broken path, not load.
    broken = [kind for kind, one in single.items() if one.errors or one.received != one.sent]
    if broken:
        print(f"error: lost or refused chunks at one session: {', '.join(broken)}")
    return 1 if broken else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--serve-raw", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-ours", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_raw or args.serve_ours:
        _pin(0)
        uvloop.run(_serve_raw() if args.serve_raw else _serve_ours())
    else:
        sys.exit(uvloop.run(bench(args.quick)))


if __name__ == "__main__":
    main()
