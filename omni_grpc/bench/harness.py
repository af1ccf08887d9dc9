"""The harness every transport benchmark runs on: child servers, paced load, tallies, the table.

A benchmark runs each server under test as a child process (pinned to CPU 0 where the machine
allows) and drives it from its own process, the load generator (pinned to CPU 1), with the same
frames and pacing; every step reports the CPU of both. Each load session sends one chunk per
period and books the answer to it in a :class:`Tally`. :mod:`.measure` runs a whole benchmark
(interleaved across servers), :mod:`.search` finds capacities; :func:`capacity` is one search
alone, and :func:`print_table` prints the result as a markdown table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from omni_grpc.bench.search import Capacity, Search

P99_LIMIT_MS = 50.0
ACK_EVERY = 50  # clients acknowledge every this many events (with their next chunk)
SERVER_CPU, LOAD_CPU = 0, 1
CONNECT_WAVE = 64  # sessions opened at once: waves, not one burst of thousands
ENGINE_CPU = "engine-cpu"  # the parent's question to a child server, and the answer's tag


# -- processes ----------------------------------------------------------------------------


def pin(cpu: int) -> None:
    """Keeps this process on one CPU where the machine has it (and allows it)."""
    with contextlib.suppress(AttributeError, OSError):
        if (os.cpu_count() or 1) > cpu:
            os.sched_setaffinity(0, {cpu})


def cpu_s(pid: int) -> float:
    """CPU seconds a process's threads have used, to the nanosecond where the kernel keeps
    scheduler statistics (else in clock ticks, 10 ms: too coarse for a step of a few seconds).
    A thread that ended during a step takes its time with it; the servers' threads live long.
    """
    try:
        if not os.path.exists(f"/proc/{pid}/schedstat"):
            raise OSError("no scheduler statistics")
        total_ns = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(FileNotFoundError),
                open(f"/proc/{pid}/task/{task}/schedstat") as stat,
            ):
                total_ns += int(stat.read().split()[0])
        return total_ns / 1e9
    except OSError:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    """The live processes ``pid`` started, and theirs (a server's worker processes)."""
    found, pending = [], [pid]
    while pending:
        parent = pending.pop()
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children") as children:
                    pending += [int(child) for child in children.read().split()]
        if parent != pid:
            found.append(parent)
    return found


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and of its live descendants together."""
    total = cpu_s(pid)
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            total += cpu_s(child)
    return total


def own_cpu_s() -> float:
    """CPU seconds this process has used."""
    return cpu_s(os.getpid())


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


def start_run() -> tuple[float, float, float]:
    """Makes this process a run's load generator (pinned to :data:`LOAD_CPU`, with sockets
    enough); returns the machine's load average before the run, for :func:`finish_run`."""
    load_before = os.getloadavg()
    pin(LOAD_CPU)
    raise_open_file_limit()
    return load_before


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
        line = self._line_of("ready")
        if not line:
            self.stop()
            raise SystemExit(f"the {kind} server did not start")
        self.ports = [int(port) for port in line[1:]]

    def _line_of(self, tag: str) -> list[str]:
        """The words of the child's next line that starts with ``tag``; [] at its end. Lines
        before it are the server's own (some log to stdout) and are passed on."""
        assert self.process.stdout is not None
        while line := self.process.stdout.readline():
            words = line.split()
            if words[:1] == [tag]:
                return words
            sys.stderr.write(line)
        return []

    @property
    def pid(self) -> int:
        return self.process.pid

    async def engine_cpu_s(self) -> float:
        """CPU seconds the child's engine has used (:mod:`.meter`); nan where not metered."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{ENGINE_CPU}\n")
        self.process.stdin.flush()
        answer = await asyncio.to_thread(self._line_of, ENGINE_CPU)
        return float(answer[1]) if answer[1:] and answer[1] != "-" else float("nan")

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
    """Returns when the benchmark's end of our stdin closes; answers its meter questions."""
    from omni_grpc.bench import meter

    while line := await asyncio.to_thread(sys.stdin.readline):
        if line.strip() == ENGINE_CPU:
            spent = meter.spent_s()
            print(ENGINE_CPU, "-" if spent is None else spent, flush=True)


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
    engine_cpu: float = float("nan")  # the mirror engine's own share, where metered
    # Chunks per answer: 1 where every chunk is answered; a server that answers a unit of
    # several chunks (vLLM-Omni: a second) answers only each unit's last chunk, and a session's
    # unit not yet complete when the step ends is not owed an answer.
    per_answer: int = 1
    done_sending: bool = False
    drained: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def owed(self) -> int:
        """Answers owed for what was sent (see ``per_answer``): every session sent as many
        chunks as the others, or one more, so each owes its whole units of the fewer."""
        if self.per_answer == 1:
            return self.sent
        return self.sessions * (self.sent // self.sessions // self.per_answer)

    def check_drained(self) -> None:
        if self.done_sending and self.received >= self.owed:
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
        return not self.errors and self.received >= 0.99 * self.owed and self.p99 < P99_LIMIT_MS


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
        try:
            await session.send()
        except Exception as broken:  # the server ended the call (e.g. CANCELLED): the step failed
            tally.errors.append(f"send failed: {broken!r}")
            return
        tally.sent += 1
        n += 1


async def drive(
    group: Sequence[LoadSession],
    period_s: float,
    duration_s: float,
    server_pid: int,
    rng: random.Random,
    engine_meter: Callable[[], Awaitable[float]] | None = None,
    per_answer: int = 1,
    server_cpu_s: Callable[[int], float] = cpu_s,
) -> Tally:
    """Opens every session, sends one chunk each per period for ``duration_s``, closes them.

    ``engine_meter`` reads the server's engine CPU seconds (:meth:`Child.engine_cpu_s`);
    ``server_cpu_s`` the server's own (:func:`tree_cpu_s` for a server of several processes).
    """
    gate = asyncio.Semaphore(CONNECT_WAVE)

    async def opened(session: LoadSession) -> None:
        async with gate:
            await session.open()

    tally = Tally(len(group), per_answer=per_answer)
    outcomes = await asyncio.gather(*(opened(session) for session in group), return_exceptions=True)
    if failed := [outcome for outcome in outcomes if isinstance(outcome, BaseException)]:
        # A server too loaded to take every session (a refused or timed-out connect) fails the
        # step, as answers that come late would: the search goes on below it.
        tally.errors.append(f"{len(failed)} of {len(group)} sessions did not open: {failed[0]!r}")
        await asyncio.gather(*(session.close() for session in group), return_exceptions=True)
        return tally
    readers = [asyncio.create_task(session.read(tally)) for session in group]
    start = time.perf_counter() + 0.05
    # Ramp-up (first chunks of every session, phases settling) is not measured.
    tally.warm_from = start + min(0.5, duration_s / 4) + period_s
    engine0 = await engine_meter() if engine_meter else float("nan")
    cpu0, server0 = own_cpu_s(), server_cpu_s(server_pid)
    phases = [start + period_s * rng.random() for _ in group]
    await asyncio.gather(
        *(_paced(s, tally, t, period_s, duration_s) for s, t in zip(group, phases, strict=True))
    )
    window = time.perf_counter() - start
    tally.client_cpu = (own_cpu_s() - cpu0) / window
    tally.server_cpu = (server_cpu_s(server_pid) - server0) / window
    if engine_meter:  # read after the window: what it costs is not the server's or ours
        tally.engine_cpu = (await engine_meter() - engine0) / window
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


class PacedLoad:
    """Paced steps of one kind of load against one server: a benchmark's load makes the
    sessions of a step and hands them to :meth:`paced`.

    ``engine_meter`` reads the server's engine CPU seconds (:meth:`Child.engine_cpu_s`), where
    it has one; ``server_cpu_s`` the server's own (:func:`tree_cpu_s` for a server of several
    processes). Each load draws its chunks and the sessions' phases from a random source of
    its own, seeded alike, so every run sends the same bytes at the same offsets.
    """

    def __init__(
        self,
        kind: str,
        port: int,
        server_pid: int,
        engine_meter: Callable[[], Awaitable[float]] | None = None,
        *,
        server_cpu_s: Callable[[int], float] = cpu_s,
    ) -> None:
        self.kind, self.port, self.server_pid = kind, port, server_pid
        self.engine_meter = engine_meter
        self.server_cpu_s = server_cpu_s
        self.rng = random.Random(0)

    async def paced(
        self, group: Sequence[LoadSession], chunk_ms: int, duration_s: float, per_answer: int = 1
    ) -> Tally:
        """One step: :func:`drive` of ``group``, a chunk every ``chunk_ms``."""
        return await drive(
            group,
            chunk_ms / 1000,
            duration_s,
            self.server_pid,
            self.rng,
            self.engine_meter,
            per_answer,
            self.server_cpu_s,
        )


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
    trials: int = 1,
) -> Capacity:
    """One server's capacity search alone (:class:`~.search.Search`); ``step(sessions)`` runs
    one paced load step. Benchmarks of several servers interleave theirs (:mod:`.measure`)."""
    search = Search(chunk_ms=chunk_ms, start=start, top=top, trials=trials, refine=refine)
    while search.at is not None:
        await settle(server_pid)
        result = await step(search.at)
        print(step_line(kind, chunk_ms, result), flush=True)
        search.record(result)
    return search.capacity


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


def cost_rows(
    costs: Sequence[tuple[float, float, bool]], sessions: int, ratio: float, target: float
) -> list[list[str]]:
    """The table rows of server CPU per chunk at a fixed load: one per server, (server us,
    engine us, saturated) each, compared by ``ratio`` against ``target``; then the engine's own
    share. A saturated server left work queued past the window, so its figure understates its
    cost: it says so, and the comparison is not judged."""
    label = f"server CPU per chunk, {sessions} paced sessions, 20 ms chunks"
    cells = [f"{c:.0f} us" + (" (saturated)" if full else "") for c, _, full in costs]
    engine = [f"{e:.0f} us" if e == e else "-" for _, e, _ in costs]  # nan: not metered
    judged = not any(full for _, _, full in costs)
    met = ("yes" if ratio <= target else "no") if judged else "n/a (saturated)"
    return [
        [label, *cells, f"{ratio:.2f}x", f"<= {target}x", met],
        [f"of which the engine's own, {sessions} sessions", *engine, "-", "-", "-"],
    ]


def client_cpu_row(sessions: int, shares: Sequence[float]) -> list[str]:
    """The table row of the load generator's share of its core, one cell per server."""
    return [
        f"load generator's CPU, {sessions} sessions",
        *(f"{s:.0%}" for s in shares),
        "-",
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


JSON_HELP = "print one JSON document of every figure on stdout (the progress and table on stderr)"


@contextlib.contextmanager
def progress_to_stderr(as_json: bool) -> Iterator[None]:
    """With ``--json``, stdout carries the document only (:func:`print_json`)."""
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        yield


def print_json(document: dict[str, object]) -> None:
    """The ``--json`` document, one line, on the real stdout."""
    print(json.dumps(document), file=sys.__stdout__, flush=True)


def print_load_average(before: tuple[float, float, float]) -> None:
    """The machine's load around the run: a busy machine explains slow figures."""
    after = os.getloadavg()
    loads = " / ".join(f"{a:.2f} {b:.2f} {c:.2f}" for a, b, c in (before, after))
    print(f"\nload average (1, 5, 15 min) before / after: {loads}")


def finish_run(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    load_before: tuple[float, float, float],
    document: dict[str, object] | None = None,
) -> None:
    """Prints a run's table and the load around it, then the ``--json`` document if any."""
    print_table(header, rows)
    print_load_average(load_before)
    if document is not None:
        print_json(document)


def lost_at_one_session(single: Mapping[str, Tally], what: str = "chunks") -> int:
    """1, saying where, when one session on some path lost ``what`` it was owed or was
    refused: that is a broken path, not load; else 0."""
    broken = [kind for kind, one in single.items() if one.errors or one.received < one.owed]
    if broken:
        print(f"error: lost or refused {what} at one session: {', '.join(broken)}")
    return 1 if broken else 0
