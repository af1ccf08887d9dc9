#!/usr/bin/env python3
"""Benchmark: what durable sessions cost, and what a second replica adds (docs/deploy.md).

scripts/bench_durability.py            # full run, about 3 to 5 minutes
scripts/bench_durability.py --quick    # a smoke run of half a minute

1. **Cost per chunk.** The service with the loopback engine in mirror mode (one chunk in, one
   out: every chunk crosses gRPC, the core, the journal and, with durability on, the writes to
   Redis) under the same paced load with ``--durability off``, ``async`` and ``sync``: server
   CPU per chunk, Redis CPU per chunk, p50 and p99 round trip.
2. **Sessions sustained.** The most paced sessions (20 ms chunks, p99 < 50 ms) that one replica
   and two replicas behind HAProxy keep up, durability async (the cluster's setting). The
   servers are child processes pinned to their CPUs (with two replicas, one per CPU) and the
   load runs in this process, as in the other benchmarks (omni_grpc/bench/harness.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from omni_cli.cluster import free_port, haproxy_config, program, proxy_sees_all_up, redis_command
from omni_grpc.bench import harness
from omni_grpc.bench.grpc_load import Load, mirror_settings

ROOT = Path(__file__).resolve().parents[1]
CHILD = [sys.executable, os.path.abspath(__file__)]
MODES = ("off", "async", "sync")
COST_SESSIONS, COST_CHUNK_MS = 16, 20


# -- the servers (child processes) ------------------------------------------------------------


async def serve(mode: str, route: str, cpu: int) -> None:
    """A child's service: mirror mode, durability ``mode``, /health for HAProxy."""
    import dataclasses

    from omni_grpc.server.app import start_server
    from omni_grpc.server.metrics_endpoint import start_metrics_endpoint

    harness.pin(cpu)
    settings = dataclasses.replace(
        mirror_settings(),
        durability=mode,
        route=route,
        redis_url=os.environ.get("OMNI_BENCH_REDIS", "redis://127.0.0.1:6379/0"),
    )
    running = await start_server(settings)
    metrics, metrics_port = await start_metrics_endpoint("127.0.0.1", 0, running.readiness)
    harness.announce_ready(running.grpc_port, metrics_port)
    await harness.serve_until_parent_gone()
    await running.stop()
    await metrics.cleanup()


# -- the runs -------------------------------------------------------------------------------


class Redis:
    """redis-server on a free port, in memory only."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            redis_command(self.port, workdir), stdout=subprocess.DEVNULL
        )
        os.environ["OMNI_BENCH_REDIS"] = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 10
        while (
            subprocess.run(
                [program("redis-cli"), "-p", str(self.port), "ping"],
                capture_output=True,
                check=False,
            ).stdout.strip()
            != b"PONG"
        ):
            if time.monotonic() > deadline:
                raise SystemExit("redis-server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


async def cost_per_chunk(quick: bool) -> list[list[str]]:
    """One paced step per durability mode; the rows of the cost table."""
    rows = []
    for mode in MODES:
        child = harness.Child([*CHILD, "--mode", mode, "--cpu", str(harness.SERVER_CPU)], "replica")
        try:
            load = Load("ours", child.ports[0], child.pid)
            redis_pid = int(os.environ["OMNI_BENCH_REDIS_PID"])
            await harness.settle(child.pid)
            redis0 = harness.cpu_s(redis_pid)
            started = time.perf_counter()
            tally = await load.step(COST_SESSIONS, COST_CHUNK_MS, 1.0 if quick else 6.0)
            window = time.perf_counter() - started
            print(harness.step_line(mode, COST_CHUNK_MS, tally), flush=True)
        finally:
            child.stop()
        chunks = max(tally.sent, 1)
        sent_window = COST_SESSIONS * 1000 / COST_CHUNK_MS  # chunks per second
        server_us = tally.server_cpu * 1e6 / sent_window
        redis_us = (harness.cpu_s(redis_pid) - redis0) * 1e6 / chunks
        rows.append(
            [
                mode,
                f"{server_us:.0f} us",
                f"{redis_us:.0f} us",
                f"{tally.p50:.2f} ms",
                f"{tally.p99:.2f} ms",
                f"{tally.received}/{tally.sent}",
                f"{window:.1f} s",
            ]
        )
    return rows


class ProxiedLoad:
    """Paced steps through HAProxy in front of replicas, with the CPU all of them used per
    chunk (the harness's own figure reads one server) at the largest step kept up."""

    def __init__(self, kind: str, port: int, pids: Sequence[int]) -> None:
        self.kind, self.server_pid, self.pids = kind, pids[0], pids
        self._load = Load("ours", port, pids[0])
        self.us_per_chunk = float("nan")

    async def step(self, sessions: int, chunk_ms: int, duration_s: float) -> harness.Tally:
        before = [harness.cpu_s(pid) for pid in self.pids]
        tally = await self._load.step(sessions, chunk_ms, duration_s)
        used = sum(harness.cpu_s(pid) for pid in self.pids) - sum(before)
        if tally.kept_up or self.us_per_chunk != self.us_per_chunk:  # nan: nothing yet
            self.us_per_chunk = used * 1e6 / max(tally.received, 1)
        return tally


async def sustained(replicas: int, workdir: Path, quick: bool) -> tuple[harness.Capacity, float]:
    """The most paced 20 ms sessions ``replicas`` replicas behind HAProxy keep up."""
    children = [
        harness.Child(
            [*CHILD, "--mode", "async", "--route", f"r{i + 1}", "--cpu", str(i % 2)], "replica"
        )
        for i in range(replicas)
    ]
    ports = (free_port(), free_port(), free_port())
    config = workdir / f"haproxy-{replicas}.cfg"
    config.write_text(
        haproxy_config(
            (ROOT / "deploy/haproxy/haproxy.cfg.in").read_text(),
            ports=ports,
            replicas=[(f"r{i + 1}", c.ports[0], c.ports[1]) for i, c in enumerate(children)],
            bridges=[],
        )
    )
    proxy = await asyncio.create_subprocess_exec(program("haproxy"), "-db", "-f", str(config))
    try:
        deadline = time.monotonic() + 30
        while not proxy_sees_all_up(ports[2], replicas):
            if time.monotonic() > deadline:
                raise SystemExit("HAProxy did not see the replicas up")
            await asyncio.sleep(0.1)
        load = ProxiedLoad(f"{replicas}x", ports[0], [c.pid for c in children])
        start, top = (8, 8) if quick else (32, 1024)
        cap = await harness.capacity(
            lambda sessions: load.step(sessions, 20, 1.0 if quick else 3.0),
            kind=load.kind,
            chunk_ms=20,
            server_pid=load.server_pid,
            start=start,
            top=top,
            refine=0 if quick else 3,
        )
        return cap, load.us_per_chunk
    finally:
        proxy.terminate()
        await proxy.wait()
        for child in children:
            child.stop()


async def bench(quick: bool, cost_only: bool = False) -> int:
    harness.raise_open_file_limit()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="omni-bench-") as tmp:
        redis = Redis(Path(tmp))
        os.environ["OMNI_BENCH_REDIS_PID"] = str(redis.process.pid)
        try:
            harness.pin(harness.LOAD_CPU)
            print(f"cost per chunk, {COST_SESSIONS} sessions x {COST_CHUNK_MS} ms chunks:")
            costs = await cost_per_chunk(quick)
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))  # replicas use both CPUs
            caps = {}
            if not cost_only:
                print("sessions sustained through HAProxy, 20 ms chunks, durability async:")
                caps = {n: await sustained(n, Path(tmp), quick) for n in (1, 2)}
        finally:
            redis.stop()
    harness.print_table(
        [
            "durability",
            "server CPU per chunk",
            "Redis CPU per chunk",
            "p50",
            "p99",
            "got",
            "window",
        ],
        costs,
    )
    if not caps:
        harness.print_load_average(load_before)
        return 0
    one, two = caps[1][0].sessions, caps[2][0].sessions
    rows = []
    for n, (cap, us) in caps.items():
        per_core = 0.7e6 / (us * 1000 / 20) if us == us and us else 0.0  # 70% of a core
        ratio = "1.00x" if n == 1 else f"{two / one:.2f}x" if one else "-"
        rows.append([str(n), cap.cell(), ratio, f"{us:.0f} us", f"{per_core * n:.0f}"])
    harness.print_table(
        [
            "replicas behind HAProxy",
            "sessions kept up (p99 < 50 ms)",
            "vs one",
            "replica CPU per chunk",
            "sessions by CPU (70% of a core each)",
        ],
        rows,
    )
    harness.print_load_average(load_before)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of half a minute")
    parser.add_argument(
        "--cost-only", action="store_true", help="the cost per chunk alone (half a minute)"
    )
    parser.add_argument("--serve-replica", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="off", help=argparse.SUPPRESS)
    parser.add_argument("--route", default="r1", help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, default=harness.SERVER_CPU, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_replica:
        return harness.run(serve(args.mode, args.route, args.cpu))
    return harness.run(bench(args.quick, args.cost_only))


if __name__ == "__main__":
    sys.exit(main())
