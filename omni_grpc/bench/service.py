"""Benchmark: our gRPC service against a raw grpc.aio echo, side by side, in one run.

Both servers run as child processes and are driven by the same load generator with the same
message sizes and pacing (:mod:`omni_grpc.bench.harness`; the servers and the sessions that load
them are :mod:`omni_grpc.bench.grpc_load`).

Reported: sessions sustained with p99 chunk round trip under 50 ms (20 ms and 100 ms chunks) and
the ratio to raw echo, server CPU per chunk, the latency our service adds per hop (p50/p99 at
one session), resume latency (new stream to first replayed event), and server memory per idle
session.

    omni-grpc bench            # full run, about 2 to 4 minutes (or scripts/bench_grpc.py)
    omni-grpc bench --quick    # a smoke run of a few seconds
    omni-grpc bench --json     # the same, every figure as one JSON document on stdout
    omni-grpc bench --cpu-only # only server CPU per chunk at 10 and 100 sessions (2 minutes)
    omni-grpc bench --cpu-only --record  # the same, recording every session against not
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc

from omni_grpc.bench import harness
from omni_grpc.bench.grpc_load import CLIENT_RATE_HZ, Load, append, serve_echo, serve_ours
from omni_grpc.bench.measure import FIXED_SESSIONS, TRIALS, Cost, fixed_costs, measure
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import pcm16_bytes

if TYPE_CHECKING:
    from omni_grpc.gen.omni.duplex.v1.duplex_pb2_grpc import DuplexServiceAsyncStub

SERVE_CHILD = [sys.executable, "-m", "omni_grpc.bench.service"]
TARGET_RATIO = 0.8
TARGET_CPU_RATIO = 1.25
TARGET_RECORD_RATIO = 1.10  # recording every session costs at most 10 % more CPU per chunk


# -- resume and memory ---------------------------------------------------------------------


async def _next(call: grpc.aio.StreamStreamCall[Any, Any]) -> pb.ConverseResponse:
    event = await call.read()
    if not isinstance(event, pb.ConverseResponse):
        raise SystemExit("the service ended a stream early")
    return event


async def resume_latency(port: int, rounds: int) -> list[float]:
    """Milliseconds from a new stream's resume to the first replayed event, per round."""
    times = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub: DuplexServiceAsyncStub = duplex_pb2_grpc.DuplexServiceStub(channel)
        for _ in range(rounds):
            call = stub.Converse(None)
            await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
            created = (await _next(call)).session_created
            await call.write(append(1, bytes(pcm16_bytes(20, CLIENT_RATE_HZ))))
            await _next(call)  # the mirrored chunk, seq 1
            call.cancel()
            start = time.perf_counter()
            again = stub.Converse(None)
            await again.write(
                pb.ConverseRequest(
                    resume_session=pb.ResumeSession(
                        session_id=created.session.id, resume_token=created.resume_token
                    )
                )
            )
            await _next(again)  # session_resumed
            replayed = await _next(again)
            assert replayed.seq == 1
            times.append((time.perf_counter() - start) * 1000)
            await again.write(pb.ConverseRequest(client_seq=2, close_session=pb.CloseSession()))
            again.cancel()
    return times


async def idle_memory_kib(port: int, pid: int, count: int) -> float:
    """Server memory per open session that does nothing, in KiB: the growth of the resident
    set of a server that carried nothing else, over ``count`` sessions held open."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub: DuplexServiceAsyncStub = duplex_pb2_grpc.DuplexServiceStub(channel)
        calls = []

        async def open_some(n: int) -> None:
            for _ in range(n):
                call = stub.Converse(None)
                await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
                await _next(call)
                calls.append(call)

        await open_some(10)  # warm the allocator and code paths first
        await asyncio.sleep(0.5)
        before = harness.rss_kib(pid)
        await open_some(count)
        await asyncio.sleep(0.5)
        after = harness.rss_kib(pid)
        for call in calls:
            call.cancel()
    return (after - before) / count


# -- main ---------------------------------------------------------------------------------


def _start_servers() -> tuple[harness.Child, harness.Child, list[Load]]:
    """Starts the raw echo and our service, each in a child process on the server core, with
    a load for each."""
    echo, ours = harness.Child(SERVE_CHILD, "echo"), harness.Child(SERVE_CHILD, "ours")
    loads = [
        Load("echo", echo.ports[0], echo.pid),
        Load("ours", ours.ports[0], ours.pid, ours.engine_cpu_s),
    ]
    return echo, ours, loads


async def bench(quick: bool, as_json: bool) -> int:
    load_before = harness.start_run()
    echo, ours, loads = _start_servers()
    # (start, top) by kind: each search starts near the capacity measured before, to save
    # steps, and its top is far above any capacity measured, so it is found, not capped.
    searches = {
        20: {"echo": (128, 4096), "ours": (32, 4096)},
        100: {"echo": (512, 8192), "ours": (128, 8192)},
    }
    try:
        results = await measure(loads, searches, quick=quick)
        single, caps = results.single, results.caps
        resumes = await resume_latency(ours.ports[0], 10 if quick else 50)
    finally:
        echo.stop()
        ours.stop()
    # In a server of its own: the one that carried the searches still frees the memory of
    # their thousands of sessions as they expire, and a count taken there can come out below
    # zero (a figure of -7.7 KiB a session was printed so).
    fresh = harness.Child(SERVE_CHILD, "ours")
    try:
        idle_kib = await idle_memory_kib(fresh.ports[0], fresh.pid, 50 if quick else 500)
    finally:
        fresh.stop()
    rows = []
    for chunk_ms in searches:
        e, o = caps[("echo", chunk_ms)], caps[("ours", chunk_ms)]
        ratio = o.sessions / e.sessions if e.sessions else 0.0
        rows.append(
            harness.capacity_row(chunk_ms, [e.cell(), o.cell()], ratio, TARGET_RATIO, quick=quick)
        )
    rows.extend(_cost_rows(results.costs))
    for chunk_ms in searches:
        e, o = caps[("echo", chunk_ms)], caps[("ours", chunk_ms)]
        ratio = o.us_per_chunk / e.us_per_chunk if e.us_per_chunk else 0.0
        rows.append(harness.cpu_row(chunk_ms, (e, o), ratio))
    base, mine = single["echo"], single["ours"]
    added50, added99 = mine.p50 - base.p50, mine.p99 - base.p99
    rows.append(
        [
            "chunk round trip p50, 1 session, 20 ms",
            f"{base.p50:.2f} ms",
            f"{mine.p50:.2f} ms",
            f"{added50:+.2f} ms",
            "<= 1 ms added",
            "yes" if added50 <= 1 else "no",
        ]
    )
    rows.append(
        [
            "chunk round trip p99, 1 session, 20 ms",
            f"{base.p99:.2f} ms",
            f"{mine.p99:.2f} ms",
            f"{added99:+.2f} ms",
            "-",
            "-",
        ]
    )
    r50 = statistics.median(resumes)
    rows.append(
        [
            "resume: new stream to first replayed event, p50",
            "-",
            f"{r50:.2f} ms",
            "-",
            "<= 5 ms",
            "yes" if r50 <= 5 else "no",
        ]
    )
    rows.append(
        [
            "server memory per idle session",
            "-",
            f"{idle_kib:.1f} KiB",
            "-",
            "<= 64 KiB",
            "yes" if idle_kib <= 64 else "no",
        ]
    )
    header = ["measure", "raw echo", "ours", "ratio / added", "target", "met"]
    document = None
    if as_json:
        document = results.document("grpc", header, rows, load_before)
        document["resume_p50_ms"], document["idle_session_kib"] = r50, idle_kib
    harness.finish_run(header, rows, load_before, document)
    return harness.lost_at_one_session(single)


def _cost_rows(costs: dict[tuple[str, int], Cost]) -> list[list[str]]:
    """The table rows of server CPU per chunk at the fixed loads, ours against the echo."""
    rows = []
    for (kind, sessions), cost in costs.items():
        if kind == "ours":
            raw = costs[("echo", sessions)]
            ratio = cost.us_per_chunk / raw.us_per_chunk if raw.us_per_chunk else 0.0
            rows.extend(
                harness.cost_rows([raw.cells, cost.cells], sessions, ratio, TARGET_CPU_RATIO)
            )
            rows.append(harness.client_cpu_row(sessions, [raw.client_cpu, cost.client_cpu]))
    return rows


async def cpu_only(quick: bool = False) -> int:
    """Only server CPU per chunk at the fixed loads (10 and 100 sessions, three interleaved
    steps each, about two minutes): the figure to take again after a change to the hot path."""
    load_before = harness.start_run()
    echo, ours, loads = _start_servers()
    try:
        sessions, trials = ((10,), 1) if quick else (FIXED_SESSIONS, TRIALS)
        costs = await fixed_costs(loads, sessions, trials, quick=quick)
    finally:
        echo.stop()
        ours.stop()
    header = ["measure", "raw echo", "ours", "ratio", "target", "met"]
    harness.finish_run(header, _cost_rows(costs), load_before)
    return 0


async def cpu_recording(quick: bool = False) -> int:
    """Server CPU per chunk at the fixed loads with every session recorded (``--record
    all``) against the same service recording nothing, side by side, interleaved step by step
    (``--cpu-only --record``). The recordings go to a temporary folder, deleted after."""
    load_before = harness.start_run()
    with tempfile.TemporaryDirectory(prefix="omni-bench-recordings-") as folder:
        plain = harness.Child(SERVE_CHILD, "ours")
        recording = harness.Child([*SERVE_CHILD, "--record-dir", folder], "recording")
        loads = [
            Load("ours", plain.ports[0], plain.pid, plain.engine_cpu_s),
            Load("recording", recording.ports[0], recording.pid, recording.engine_cpu_s),
        ]
        try:
            fixed = (10,) if quick else FIXED_SESSIONS
            costs = await fixed_costs(loads, fixed, 1 if quick else TRIALS, quick=quick)
        finally:
            plain.stop()
            recording.stop()
    rows = []
    for (kind, sessions), cost in costs.items():
        if kind == "recording":
            off = costs[("ours", sessions)]
            ratio = cost.us_per_chunk / off.us_per_chunk if off.us_per_chunk else 0.0
            rows.extend(
                harness.cost_rows([off.cells, cost.cells], sessions, ratio, TARGET_RECORD_RATIO)
            )
            rows.append(harness.client_cpu_row(sessions, [off.client_cpu, cost.client_cpu]))
    header = ["measure", "ours, --record off", "ours, --record all", "ratio", "target", "met"]
    harness.finish_run(header, rows, load_before)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark (or, with a hidden flag, one of its servers); returns the status."""
    parser = argparse.ArgumentParser(
        prog="omni-grpc bench", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--json", action="store_true", help=harness.JSON_HELP)
    parser.add_argument(
        "--cpu-only",
        action="store_true",
        help="only server CPU per chunk at 10 and 100 paced sessions (about two minutes)",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="with --cpu-only: the service recording every session against it recording "
        "nothing, side by side",
    )
    parser.add_argument("--serve-echo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-ours", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-recording", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--record-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_echo or args.serve_ours or args.serve_recording:
        harness.pin(harness.SERVER_CPU)
        if args.serve_echo:
            return harness.run(serve_echo())
        return harness.run(serve_ours(args.record_dir if args.serve_recording else None))
    if args.cpu_only and args.record:
        return harness.run(cpu_recording(args.quick))
    if args.cpu_only:
        return harness.run(cpu_only(args.quick))
    with harness.progress_to_stderr(args.json):
        return harness.run(bench(args.quick, args.json))


if __name__ == "__main__":
    raise SystemExit(main())
