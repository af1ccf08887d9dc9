"""What every transport benchmark shares: servers in child processes, paced load, capacity.

A benchmark runs each server under test as a child process (pinned to CPU 0 where the machine
allows) and drives it from the parent (pinned to CPU 1) with the same frames and pacing. Each
load session sends one chunk per period and books the answer to it in a :class:`Tally`;
:func:`capacity` searches the most sessions whose p99 round trip stays under
:data:`P99_LIMIT_MS`, and :func:`print_table` prints the result as a markdown table.
"""

from __future__ import annotations

import asyncio
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
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Protocol

P99_LIMIT_MS = 50.0
ACK_EVERY = 50  # clients acknowledge every this many events (with their next chunk)
SERVER_CPU, LOAD_CPU = 0, 1
CONNECT_WAVE = 64  # sessions opened at once: waves, not one burst of thousands


# -- processes ----------------------------------------------------------------------------


def pin(cpu: int) -> None:
    """Keeps this process on one CPU where the machine has it (and allows it)."""
    with contextlib.suppress(AttributeError, OSError):
        if (os.cpu_count() or 1) > cpu:
            os.sched_setaffinity(0, {cpu})


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds this process has used."""
    times = os.times()
    return times.user + times.system


def rss_kib(pid: int) -> int:
    """Resident memory of a process, in KiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def raise_open_file_limit() -> None:
    """Thousands of sessions need thousands of sockets."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Child:
    """A server under test in a child process: ``command`` with ``--serve-KIND`` appended.

    The child pins itself to the server CPU, prints ``ready PORT...`` once it listens, and
    exits when its stdin closes (:func:`serve_until_parent_gone`), even if the parent was killed.
    """

    def __init__(self, command: Sequence[str], kind: str) -> None:
        self.kind = kind
        self.process = subprocess.Popen(
            [*command, f"--serve-{kind}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            # A session of its own puts the server in its own scheduler autogroup, so on a
            # shared machine it gets a fair share of its CPU instead of splitting ours.
            start_new_session=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().split()
        if not line or line[0] != "ready":
            self.stop()
            raise SystemExit(f"the {kind} server did not start")
        self.ports = [int(port) for port in line[1:]]

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        if self.process.returncode is None:
            self.process.kill()
            self.process.wait()


def announce_ready(*ports: int) -> None:
    """A child's one line to its parent: it listens on ``ports``."""
    print("ready", *ports, flush=True)


async def serve_until_parent_gone() -> None:
    """Returns when the benchmark's end of our stdin closes."""
    await asyncio.to_thread(sys.stdin.read)


def run(coroutine: Coroutine[object, object, int | None]) -> int:
    """Runs a benchmark's (or a child server's) main coroutine on uvloop; returns its status."""
    import uvloop

    return int(uvloop.run(coroutine) or 0)


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


class LoadSession(Protocol):
    """One client session: ``open``, then ``send`` chunks while ``read`` books the answers."""

    sent: deque[float]  # send times of the chunks not answered yet

    async def open(self) -> None: ...
    async def send(self) -> None: ...
    async def read(self, tally: Tally) -> None: ...
    async def close(self) -> None: ...


async def _paced(
    session: LoadSession, tally: Tally, start: float, period_s: float, duration_s: float
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


async def drive(
    group: Sequence[LoadSession],
    period_s: float,
    duration_s: float,
    server_pid: int,
    rng: random.Random,
) -> Tally:
    """Opens every session, sends one chunk each per period for ``duration_s``, closes them."""
    gate = asyncio.Semaphore(CONNECT_WAVE)

    async def opened(session: LoadSession) -> None:
        async with gate:
            await session.open()

    await asyncio.gather(*(opened(session) for session in group))
    tally = Tally(len(group))
    readers = [asyncio.create_task(session.read(tally)) for session in group]
    start = time.perf_counter() + 0.05
    # Ramp-up (first chunks of every session, phases settling) is not measured.
    tally.warm_from = start + min(0.5, duration_s / 4) + period_s
    cpu0, server0 = own_cpu_s(), cpu_s(server_pid)
    phases = [start + period_s * rng.random() for _ in group]
    await asyncio.gather(
        *(_paced(s, tally, t, period_s, duration_s) for s, t in zip(group, phases, strict=True))
    )
    window = time.perf_counter() - start
    tally.client_cpu = (own_cpu_s() - cpu0) / window
    tally.server_cpu = (cpu_s(server_pid) - server0) / window
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


def step_line(kind: str, chunk_ms: int, tally: Tally) -> str:
    """One load step as a line of the benchmark's progress output."""
    return (
        f"  {kind:6} {chunk_ms:3} ms x {tally.sessions:4}: p50 {tally.p50:7.2f} ms  "
        f"p99 {tally.p99:8.2f} ms  got {tally.received}/{tally.sent}  "
        f"cpu server {tally.server_cpu:4.0%} client {tally.client_cpu:4.0%}"
        + (f"  errors {len(tally.errors)}: {tally.errors[0]}" if tally.errors else "")
    )


def single_line(kind: str, tally: Tally) -> str:
    """One session's step as a line of the benchmark's progress output."""
    return (
        f"  {kind:6}: p50 {tally.p50:6.2f} ms  p99 {tally.p99:6.2f} ms  "
        f"got {tally.received}/{tally.sent}"
    )


# -- capacity -----------------------------------------------------------------------------


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

    def cell(self) -> str:
        """The capacity as a table cell, with what limited the search."""
        note = " (ladder top)" if self.at_top else " (client-bound)" if self.client_bound else ""
        return f"{self.sessions}{note}"


async def settle(pid: int, limit_s: float = 10.0) -> None:
    """Waits until a server has worked off what a failed step left queued."""
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        before = cpu_s(pid)
        await asyncio.sleep(0.25)
        if cpu_s(pid) - before < 0.25 * 0.1:
            return


async def capacity(
    step: Callable[[int], Awaitable[Tally]],
    *,
    kind: str,
    chunk_ms: int,
    server_pid: int,
    start: int,
    top: int,
    refine: int,
) -> Capacity:
    """The most sessions ``step`` keeps up: doubling from ``start`` up to ``top``, then bisecting.

    ``step(sessions)`` runs one paced load step; ``refine`` bounds the bisection steps.
    """
    cap = Capacity()

    async def ok(sessions: int) -> bool:
        await settle(server_pid)
        result = await step(sessions)
        print(step_line(kind, chunk_ms, result), flush=True)
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


class SteppedLoad(Protocol):
    """One kind of load against one server: what :func:`measure` drives."""

    kind: str
    server_pid: int

    async def step(self, sessions: int, chunk_ms: int, duration_s: float) -> Tally: ...


# Where each capacity search starts and stops, by chunk length and load kind.
Searches = dict[int, dict[str, tuple[int, int]]]


async def measure(
    loads: Sequence[SteppedLoad], searches: Searches, *, quick: bool
) -> tuple[dict[str, Tally], dict[tuple[str, int], Capacity]]:
    """One paced session of 20 ms chunks per load, then a capacity search per load and chunk.

    Returns the single-session tallies by kind and the capacities by (kind, chunk ms). A quick
    run takes one step of 4 sessions per search: it proves the path works, it measures nothing.
    """
    if quick:
        searches = {chunk: {load.kind: (4, 4) for load in loads} for chunk in searches}
    single: dict[str, Tally] = {}
    caps: dict[tuple[str, int], Capacity] = {}
    print("one session, 20 ms chunks:")
    for load in loads:
        single[load.kind] = one = await load.step(1, 20, 1.0 if quick else 5.0)
        print(single_line(load.kind, one), flush=True)
    for chunk_ms, search in searches.items():
        print(f"capacity, {chunk_ms} ms chunks:", flush=True)
        for load in loads:
            start, top = search[load.kind]
            caps[(load.kind, chunk_ms)] = await capacity(
                lambda sessions, load=load, chunk_ms=chunk_ms: load.step(  # type: ignore[misc]
                    sessions, chunk_ms, 1.0 if quick else 3.0
                ),
                kind=load.kind,
                chunk_ms=chunk_ms,
                server_pid=load.server_pid,
                start=start,
                top=top,
                refine=0 if quick else 3,
            )
    return single, caps


def capacity_row(
    chunk_ms: int, cells: Sequence[str], ratio: float, target: float, *, quick: bool
) -> list[str]:
    """The table row of one capacity comparison against its target ratio."""
    # A quick run's one step per kind measures nothing about capacity.
    met = "n/a (quick)" if quick else "yes" if ratio >= target else "no"
    return [
        f"paced sessions, p99 < {P99_LIMIT_MS:.0f} ms, {chunk_ms} ms chunks",
        *cells,
        f"{ratio:.2f}x",
        f">= {target}x",
        met,
    ]


def cpu_row(chunk_ms: int, caps: Sequence[Capacity], ratio: float) -> list[str]:
    """The table row of server CPU per chunk, with what it projects per core."""
    return [
        f"server CPU per chunk, {chunk_ms} ms chunks (sessions per core at 70% CPU)",
        *(f"{c.us_per_chunk:.0f} us ({c.per_core(chunk_ms):.0f})" for c in caps),
        f"{ratio:.2f}x",
        "-",
        "-",
    ]


# -- report -------------------------------------------------------------------------------


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Prints a markdown table."""
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def print_load_average(before: tuple[float, float, float]) -> None:
    """The machine's load around the run: a busy machine explains slow figures."""
    after = os.getloadavg()
    loads = " / ".join(f"{a:.2f} {b:.2f} {c:.2f}" for a, b, c in (before, after))
    print(f"\nload average (1, 5, 15 min) before / after: {loads}")
