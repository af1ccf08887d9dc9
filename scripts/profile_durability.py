#!/usr/bin/env python3
"""Profile: what a ``sync`` session waits for, the session store alone (no gRPC, no engine).

    .venv/bin/python scripts/profile_durability.py [--sessions 16] [--seconds 6] [--profile]

A real ``redis-server`` and one :class:`~omni_grpc.server.durable.DurableStore` in ``sync`` mode
in this process; each of N sessions numbers one event every 20 ms, marks itself dirty and waits
(:meth:`~omni_grpc.server.durable.DurableStore.settled`) as a stream's writer does before the
event goes out. Printed: the wait's p50 / p90 / p99, the rounds written, a Redis PING's round
trip from the same loop (the floor of any wait), this process's CPU per event, and the load
average; ``--profile`` adds cProfile's top functions by their own time. Side by side with
``scripts/bench_durability.py``, whose ``sync`` p50 adds gRPC, the core and the load's own hops.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from omni_cli.cluster import free_port, program, redis_command  # noqa: E402
from omni_grpc.server.durable import DURABILITY_ROUNDS, DurableStore, ItemLog  # noqa: E402
from tests.core.helpers import delta, open_session  # noqa: E402

EVENT_EVERY_S = 0.02


async def one_session(
    store: DurableStore, index: int, sessions: int, seconds: float
) -> list[float]:
    """One session's waits, in seconds."""
    session, items, waits = open_session().session, ItemLog(), []
    await asyncio.sleep(index * EVENT_EVERY_S / sessions)  # spread over the period
    due = time.monotonic()
    end = due + seconds
    while time.monotonic() < end:
        session.publish(delta("resp_1"), 1.0)
        store.mark(session, items)
        started = time.perf_counter()
        await store.settled(session)
        waits.append(time.perf_counter() - started)
        due += EVENT_EVERY_S
        await asyncio.sleep(max(0.0, due - time.monotonic()))
    return waits


async def pings(store: DurableStore, seconds: float) -> list[float]:
    times = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        await store.redis.ping()
        times.append(time.perf_counter() - started)
        await asyncio.sleep(0.05)
    return times


async def run(url: str, sessions: int, seconds: float) -> None:
    store = DurableStore(url, "r1", "sync", record_ttl_s=60.0, grace_s=30.0)
    await store.start()
    load = os.getloadavg()[0]
    cpu, rounds = time.process_time(), DURABILITY_ROUNDS._value.get()
    *per_session, rtts = await asyncio.gather(
        *(one_session(store, i, sessions, seconds) for i in range(sessions)),
        pings(store, seconds),
    )
    cpu, rounds = time.process_time() - cpu, DURABILITY_ROUNDS._value.get() - rounds
    await store.stop()
    waits = sorted(w * 1000 for one in per_session for w in one)

    def quantile(share: float) -> float:
        return waits[int(share * (len(waits) - 1))]

    print(
        f"{sessions} sessions, an event each per {EVENT_EVERY_S * 1000:.0f} ms: "
        f"{len(waits)} events in {rounds:.0f} rounds; sync wait p50 {quantile(0.5):.2f} ms, "
        f"p90 {quantile(0.9):.2f} ms, p99 {quantile(0.99):.2f} ms; Redis PING p50 "
        f"{statistics.median(rtts) * 1000:.2f} ms; CPU per event {cpu * 1e6 / len(waits):.0f} us; "
        f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--profile", action="store_true", help="cProfile's top functions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="omni-profile-") as tmp:
        port = free_port()
        redis = subprocess.Popen(redis_command(port, Path(tmp)), stdout=subprocess.DEVNULL)
        try:
            ping = [program("redis-cli"), "-p", str(port), "ping"]
            deadline = time.monotonic() + 30
            while subprocess.run(ping, capture_output=True, check=False).stdout.strip() != b"PONG":
                if time.monotonic() > deadline or redis.poll() is not None:
                    raise SystemExit("redis-server did not start")
                time.sleep(0.05)
            work = run(f"redis://127.0.0.1:{port}/0", args.sessions, args.seconds)
            if not args.profile:
                asyncio.run(work)
                return 0
            profiler = cProfile.Profile()
            profiler.runcall(asyncio.run, work)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        finally:
            redis.terminate()
            redis.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
