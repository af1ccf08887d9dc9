#!/usr/bin/env python3
"""Benchmark: the websocket bridge against a raw aiohttp websocket echo, side by side, in one run.

Both servers run as child processes and are driven by the same load generator with the same
frames and pacing (the shared harness is omni_grpc/bench/harness.py): each session sends an
``input_audio_buffer.append`` event (JSON, pcm16 at 24 kHz in base64) every chunk and times the
answer to it.

* **raw**: a bare aiohttp websocket server that parses each frame with orjson, decodes the
  base64 audio and answers with a ``response.output_audio.delta`` frame of the same audio;
* **bridge**: the real service as ``omni-grpc serve`` runs it (bridge and gRPC service in one
  process) with the loopback engine in ``mirror`` mode. Each chunk crosses the whole path:
  websocket JSON and base64, the bridge, gRPC, the session core, the audio edge, the engine,
  and back as one ``response.output_audio.delta``;
* **gRPC**: the same process driven over gRPC directly (as ``omni-grpc bench`` does), so the
  difference to **bridge** is what the bridge hop adds.

The audio edge resamples 24 kHz to 16 kHz and back in blocks, so a delta may carry more or less
audio than its chunk (some are empty): deltas are matched to appends by count, in order.

Reported: sessions sustained with p99 chunk round trip under 50 ms (20 ms and 100 ms chunks) and
the bridge's ratio to raw, and the latency each hop adds at one session (p50/p99).

    scripts/bench_bridge.py            # full run, about 3 to 4 minutes
    scripts/bench_bridge.py --quick    # a smoke run of a few seconds
    scripts/bench_bridge.py --json     # every figure as one JSON document on stdout
    scripts/bench_bridge.py --cpu-only # only server CPU per chunk at 10 and 100 sessions, raw
                                       # echo and bridge interleaved (about a minute and a half)
    scripts/bench_bridge.py --workers  # the bridge path in one process and in two
                                       # (--bridge-workers 2), unpinned, side by side
"""

from __future__ import annotations

import argparse
import binascii
import os
import sys
import time
from collections.abc import Sequence

import aiohttp
import orjson
from aiohttp import WSMsgType, web

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from omni_grpc.bench import harness
from omni_grpc.bench.grpc_load import CLIENT_RATE_HZ, mirror_settings
from omni_grpc.bench.grpc_load import Load as GrpcLoad
from omni_grpc.bench.measure import (
    FIXED_CHUNK_MS,
    FIXED_SESSIONS,
    TRIALS,
    Cost,
    SteppedLoad,
    fixed_costs,
    measure,
)
from omni_grpc.bench.ws_load import DELTA, WsSession, append_frame
from omni_grpc.wire.pcm import pcm16_bytes, pcm16_ms

SERVE_CHILD = [sys.executable, os.path.abspath(__file__)]
TARGET_RATIO = 0.6
KINDS = ("raw", "grpc", "bridge")
# --workers: the bridge path served by one process and by two (``--bridge-workers 2``).
WORKER_KINDS = ("bridge-1", "bridge-2")


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
            duration_ms = pcm16_ms(len(audio), CLIENT_RATE_HZ)
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
    harness.announce_ready(runner.addresses[0][1])
    await harness.serve_until_parent_gone()


async def _serve_ours(bridge_workers: int = 1) -> None:
    from omni_cli.config import ServeSettings
    from omni_cli.launch import start_service
    from omni_grpc.bench import meter

    meter.install()
    settings = ServeSettings(server=mirror_settings(), http_port=0, bridge_workers=bridge_workers)
    service = await start_service(settings)
    harness.announce_ready(service.server.grpc_port, service.http_port or 0)
    await harness.serve_until_parent_gone()
    await service.stop()


# -- load ---------------------------------------------------------------------------------


class RawSession(WsSession):
    """A session of the raw echo, which keeps no session to close."""

    closes_session = False


class BridgeSession(WsSession):
    """A session of our bridge, as a client of the duplex extensions (``extensions=1``): it
    acknowledges what it read."""

    acks = True

    async def open(self) -> None:
        ws = await self.connect()
        # The session opens on connect (?model=): wait until it has.
        first = orjson.loads((await ws.receive()).data)
        if first.get("type") != "session.created":
            raise SystemExit(f"the bridge answered the connect with {first}")


class Load(harness.PacedLoad):
    """Paced steps of websocket sessions against one server: the raw echo when ``kind`` is
    "raw", our bridge under any other name."""

    async def step(self, sessions: int, chunk_ms: int, duration_s: float) -> harness.Tally:
        frame = append_frame(self.rng.randbytes(pcm16_bytes(chunk_ms, CLIENT_RATE_HZ)))
        url = f"http://127.0.0.1:{self.port}/v1/realtime?model=loopback&extensions=1"
        session = RawSession if self.kind == "raw" else BridgeSession
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            group = [session(http, url, frame) for _ in range(sessions)]
            return await self.paced(group, chunk_ms, duration_s)


# -- main ---------------------------------------------------------------------------------


async def bench(quick: bool, as_json: bool) -> int:
    load_before = harness.start_run()
    raw, ours = harness.Child(SERVE_CHILD, "raw"), harness.Child(SERVE_CHILD, "ours")
    grpc_port, http_port = ours.ports
    loads: list[SteppedLoad] = [
        Load("raw", raw.ports[0], raw.pid),
        GrpcLoad("grpc", grpc_port, ours.pid, ours.engine_cpu_s),
        Load("bridge", http_port, ours.pid, ours.engine_cpu_s),
    ]
    # (start, top) by kind: each search starts near the capacity measured before, to save
    # steps, and its top is far above any capacity measured, so it is found, not capped.
    searches = {
        20: {"raw": (256, 4096), "grpc": (32, 4096), "bridge": (16, 4096)},
        100: {"raw": (1024, 8192), "grpc": (128, 8192), "bridge": (64, 8192)},
    }
    try:
        results = await measure(loads, searches, quick=quick)
        single, caps = results.single, results.caps
    finally:
        raw.stop()
        ours.stop()
    rows = []
    for chunk_ms in searches:
        r, b = caps[("raw", chunk_ms)].sessions, caps[("bridge", chunk_ms)].sessions
        ratio = b / r if r else 0.0
        cells = [caps[(kind, chunk_ms)].cell() for kind in KINDS]
        rows.append(harness.capacity_row(chunk_ms, cells, ratio, TARGET_RATIO, quick=quick))
    for sessions in sorted({n for _, n in results.costs}):
        rows += _cost_rows(sessions, [results.costs[(kind, sessions)] for kind in KINDS])
    for chunk_ms in searches:
        costs = [caps[(kind, chunk_ms)] for kind in KINDS]
        ratio = costs[0].us_per_chunk / costs[2].us_per_chunk if costs[2].us_per_chunk else 0.0
        rows.append(harness.cpu_row(chunk_ms, costs, ratio))
    quantiles = {name: [getattr(single[kind], name) for kind in KINDS] for name in ("p50", "p99")}
    for name, (r, g, b) in quantiles.items():
        rows.append(
            [
                f"chunk round trip {name}, 1 session, 20 ms",
                f"{r:.2f} ms",
                f"{g:.2f} ms",
                f"{b:.2f} ms",
                f"{b - r:+.2f} ms",
                "-",
                "-",
            ]
        )
    for name, (_, g, b) in quantiles.items():
        rows.append(
            [
                f"added by the bridge hop (bridge - gRPC), {name}, 1 session",
                "-",
                "-",
                f"{b - g:+.2f} ms",
                "-",
                "-",
                "-",
            ]
        )
    header = ["measure", "raw ws echo", "ours, gRPC", "ours, bridge", "bridge / raw"]
    header += ["target", "met"]
    document = results.document("bridge", header, rows, load_before) if as_json else None
    harness.finish_run(header, rows, load_before, document)
    return harness.lost_at_one_session(single)


def _cost_rows(sessions: int, fixed: Sequence[Cost]) -> list[list[str]]:
    """Server CPU per chunk at a fixed load, ours (the last) against the raw echo (the first),
    with the engine's own share and the load generator's. The issue sets no CPU target for the
    bridge: its ratio is told, not judged."""
    ratio = fixed[-1].us_per_chunk / fixed[0].us_per_chunk if fixed[0].us_per_chunk else 0.0
    cost, engine = harness.cost_rows([c.cells for c in fixed], sessions, ratio, float("inf"))
    client = harness.client_cpu_row(sessions, [c.client_cpu for c in fixed])
    return [[*cost[:-2], "-", "-"], engine, client]


async def cpu_only() -> int:
    """Only server CPU per chunk at the fixed loads, raw echo and bridge in turn (three steps
    each): the figure to take again after a change to the bridge's hot path."""
    load_before = harness.start_run()
    raw, ours = harness.Child(SERVE_CHILD, "raw"), harness.Child(SERVE_CHILD, "ours")
    loads = [
        Load("raw", raw.ports[0], raw.pid),
        Load("bridge", ours.ports[1], ours.pid, ours.engine_cpu_s),
    ]
    try:
        costs = await fixed_costs(loads, FIXED_SESSIONS, TRIALS, quick=False)
    finally:
        raw.stop()
        ours.stop()
    rows = []
    for sessions in FIXED_SESSIONS:
        rows += _cost_rows(sessions, [costs[("raw", sessions)], costs[("bridge", sessions)]])
    header = ["measure", "raw ws echo", "ours, bridge", "bridge / raw", "target", "met"]
    harness.finish_run(header, rows, load_before)
    return 0


async def workers(quick: bool) -> int:
    """The bridge path of ``omni-grpc serve`` with one bridge process and with two
    (``--bridge-workers 2``: the second reaches the service over gRPC), side by side: sessions
    sustained, server CPU per chunk over all its processes, and how a fixed load splits between
    the processes. Neither server is pinned: both may use every core (so, on a small machine,
    the load generator's too)."""
    load_before = harness.start_run()
    one, two = (harness.Child(SERVE_CHILD, kind) for kind in WORKER_KINDS)
    # A bridge of several processes: its CPU is counted over all of them.
    loads = [
        Load(kind, child.ports[1], child.pid, server_cpu_s=harness.tree_cpu_s)
        for kind, child in zip(WORKER_KINDS, (one, two), strict=True)
    ]
    searches = {20: dict.fromkeys(WORKER_KINDS, (64, 4096))}
    try:
        results = await measure(loads, searches, quick=quick)
        split_at = 20 if quick else FIXED_SESSIONS[-1]
        split = await _split(loads[1], split_at, 1.0 if quick else 4.0)
    finally:
        one.stop()
        two.stop()
    caps = [results.caps[(kind, 20)] for kind in WORKER_KINDS]
    ratio = caps[1].sessions / caps[0].sessions if caps[0].sessions else 0.0
    rows = [harness.capacity_row(20, [c.cell() for c in caps], ratio, 1.0, quick=quick)]
    for sessions in sorted({n for _, n in results.costs}):
        fixed = [results.costs[(kind, sessions)] for kind in WORKER_KINDS]
        ratio = fixed[1].us_per_chunk / fixed[0].us_per_chunk if fixed[0].us_per_chunk else 0.0
        cost, _ = harness.cost_rows([c.cells for c in fixed], sessions, ratio, float("inf"))
        rows.append([*cost[:-2], "-", "-"])
    label = f"CPU of each process, {split_at} sessions, 20 ms (service+bridge, worker)"
    rows.append([label, "-", " / ".join(f"{share:.0%}" for share in split), "-", "-", "-"])
    header = ["measure", "1 process", "2 processes", "2 / 1", "target", "met"]
    harness.finish_run(header, rows, load_before)
    return 0


async def _split(load: Load, sessions: int, duration_s: float) -> list[float]:
    """Each process's share of a core while ``load`` runs a fixed step of ``sessions``."""
    pids = [load.server_pid, *harness.descendants(load.server_pid)]
    before = [harness.cpu_s(pid) for pid in pids]
    started = time.perf_counter()
    await load.step(sessions, FIXED_CHUNK_MS, duration_s)
    window = time.perf_counter() - started
    shares = [(harness.cpu_s(pid) - was) / window for pid, was in zip(pids, before, strict=True)]
    return [share for share in shares if share >= 0.01]  # the worker, not multiprocessing's helper


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--json", action="store_true", help=harness.JSON_HELP)
    parser.add_argument(
        "--cpu-only",
        action="store_true",
        help="only server CPU per chunk at 10 and 100 paced sessions (about a minute and a half)",
    )
    parser.add_argument(
        "--workers",
        action="store_true",
        help="the bridge path with one process and with two (--bridge-workers 2), unpinned",
    )
    parser.add_argument("--serve-raw", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-ours", action="store_true", help=argparse.SUPPRESS)
    for kind in WORKER_KINDS:
        parser.add_argument(f"--serve-{kind}", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_raw or args.serve_ours:
        harness.pin(harness.SERVER_CPU)
        return harness.run(_serve_raw() if args.serve_raw else _serve_ours())
    for count, kind in enumerate(WORKER_KINDS, start=1):
        if getattr(args, f"serve_{kind.replace('-', '_')}"):
            return harness.run(_serve_ours(bridge_workers=count))
    if args.workers:
        return harness.run(workers(args.quick))
    if args.cpu_only:
        return harness.run(cpu_only())
    with harness.progress_to_stderr(args.json):
        return harness.run(bench(args.quick, args.json))


if __name__ == "__main__":
    sys.exit(main())
