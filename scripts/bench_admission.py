#!/usr/bin/env python3
"""Benchmark: admission at capacity under overload (docs/operations.md, docs/deploy.md).

scripts/bench_admission.py            # full run: 60 s of arrivals per load, about 20 minutes
scripts/bench_admission.py --quick    # a smoke run of about three minutes

One replica, then three behind HAProxy (scripts/cluster's runner: Redis, HAProxy with each
replica's agent check, a bridge process), each with the loopback engine in mirror mode and
``--capacity C``. Sessions arrive at random (Poisson) at 1x, 2x and 5x the rate the replicas'
places serve (all places over the mean session length); each lasts a random time (uniform,
from half to one and a half times the mean), streams 100 ms chunks of audio in real time and
reads each chunk's echo, then closes. A fifth present the key of a higher priority class. Per
run it prints:

* **wait** p50 and p99, from the open to ``session_created``, over the admitted sessions (0
  when a place was free), and how many waited;
* **estimate error**: the first estimated wait a session was told against the wait it had, as
  a factor (the larger of the two over the smaller, each counted as at least 1 s: a wait under a
  second is told as one), p50 and p90, and the share within a factor of two;
* **order violations within a class**: pairs of sessions of one class on one replica where
  the later one (its open sent after the earlier one was told its place) got its session more
  than ``--order-slack-ms`` before the earlier one got its own or was refused;
* **real time**: admitted sessions whose echoes all came back (99th percentile) within one
  chunk period;
* **refusals by reason** and **sessions lost** (an open that neither opened nor was refused,
  or a session that ended other than by its close, or lost echoes);
* with three replicas, **queued while room elsewhere** (each replica's /health read every 50
  ms): the new sessions that were queued on one replica while another had had a free place for
  longer than the agent's check interval (250 ms), of those queued; and the longest time a
  replica held waiting sessions while another had a free place (a session already waiting
  stays on its replica: no queue spans replicas).

The figures mean something only on a quiet machine with more cores than replicas: the load,
the replicas, HAProxy and Redis share the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import quantiles

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import aiohttp

from omni_cli.cluster import AGENT_INTER
from omni_cli.cluster_child import ClusterChild
from omni_grpc.bench import harness
from omni_grpc.client import ClientOptions, DuplexClient, ReconnectPolicy
from omni_grpc.client.errors import OpenRefused
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import pcm16_bytes

CHUNK_MS = 100
GOLD, STANDARD = "bench-gold-key", "bench-standard-key"
GOLD_SHARE = 0.2
LOADS = (1.0, 2.0, 5.0)
SAMPLE_S = 0.05
START_TIMEOUT_S = 180.0
FLOOR_S = 1.0  # waits and estimates under this count as this in the estimate's error
CHECK_S = 0.25  # the agent check's interval (AGENT_INTER)


@dataclass(frozen=True, slots=True)
class Plan:
    """One run's shape."""

    capacity: int  # per replica
    mean_s: float  # mean session length
    arrivals_s: float  # how long sessions arrive
    max_wait_s: float
    max_length: int  # per replica
    order_slack_s: float


@dataclass
class Record:
    """What one session's client saw."""

    klass: str
    opened_at: float = 0.0  # when its open went out
    notices: list[tuple[float, int, float]] = field(default_factory=list)  # when, position, s
    created_at: float | None = None
    refused: str = ""
    refused_at: float | None = None
    lost: str = ""
    route: str = ""
    rtts: list[float] = field(default_factory=list)
    chunks: int = 0

    @property
    def waited(self) -> bool:
        return bool(self.notices)

    @property
    def wait_s(self) -> float:
        assert self.created_at is not None
        return self.created_at - self.opened_at

    @property
    def ended_at(self) -> float:
        return self.created_at if self.created_at is not None else (self.refused_at or math.inf)


# -- the cluster ----------------------------------------------------------------------------


class Cluster(ClusterChild):
    """scripts/cluster's runner as a child process: Redis, the replicas, HAProxy."""

    def __init__(self, replicas: int, plan: Plan, workdir: Path) -> None:
        serve = [
            *("--engine", "loopback", "--engine-option", "mode=mirror"),
            *("--engine-option", "pace=fast", "--capacity", str(plan.capacity)),
            *("--queue-max-wait-s", str(plan.max_wait_s)),
            *("--queue-max-length", str(plan.max_length), "--log-level", "warning"),
        ]
        env = dict(os.environ)
        env["OMNI_GRPC_API_KEYS"] = f"{GOLD},{STANDARD}"
        env["OMNI_GRPC_PRIORITY_CLASSES"] = f"gold={GOLD}"
        state_file, log = workdir / f"cluster-{replicas}.json", workdir / f"cluster-{replicas}.log"
        super().__init__(replicas, serve, state_file, log, env)

    async def ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while not self.read_state():
                if time.monotonic() > deadline:
                    raise SystemExit("the cluster did not start; see its log")
                await asyncio.sleep(0.1)
        except RuntimeError as ended:
            raise SystemExit(str(ended)) from None

    @property
    def target(self) -> str:
        return str(self.state["proxy"]["grpc"])

    @property
    def health_urls(self) -> dict[str, str]:
        replicas = self.state["replicas"]
        return {r["route"]: f"http://{r['metrics']}/health" for r in replicas}


# -- the load -------------------------------------------------------------------------------


PATIENT = ReconnectPolicy(max_attempts=20, max_elapsed_s=30.0)


async def one_session(target: str, record: Record, length_s: float, audio: bytes) -> None:
    """Opens (maybe after a wait), streams ``length_s`` of chunks in real time, closes."""
    key = GOLD if record.klass == "gold" else STANDARD

    def told(notice: pb.SessionQueued) -> None:
        record.notices.append(
            (time.monotonic(), notice.position, notice.estimated_wait.ToMilliseconds() / 1000)
        )

    options = ClientOptions(on_queued=told, reconnect=PATIENT)
    record.opened_at = time.monotonic()
    try:
        client = await DuplexClient.connect(target, api_key=key, options=options)
    except OpenRefused as refused:
        record.refused, record.refused_at = refused.code or "refused", time.monotonic()
        return
    except Exception as error:  # reported, not raised: the run goes on
        record.lost = f"open: {error!r}"
        return
    record.created_at = time.monotonic()
    record.route = client._conn.route
    sent: list[float] = []
    reader = asyncio.create_task(read_echoes(client, record, sent))
    try:
        period = CHUNK_MS / 1000
        start = time.monotonic()
        for index in range(max(1, round(length_s / period))):
            await asyncio.sleep(max(0.0, start + index * period - time.monotonic()))
            sent.append(time.monotonic())
            await client.append_audio(audio)
        record.chunks = len(sent)
        await asyncio.sleep(0.5)  # the last echoes
        await client.close()
        await asyncio.wait_for(reader, 10)
    except Exception as error:
        record.lost = record.lost or f"session: {error!r}"
        reader.cancel()
    if len(record.rtts) < record.chunks and not record.lost:
        record.lost = f"{record.chunks - len(record.rtts)} echoes lost"


async def read_echoes(client: DuplexClient, record: Record, sent: list[float]) -> None:
    try:
        async for event in client.events():
            if event.WhichOneof("event") == "output_audio_delta" and len(record.rtts) < len(sent):
                record.rtts.append(time.monotonic() - sent[len(record.rtts)])
    except Exception as error:
        record.lost = f"events: {error!r}"


async def sample_room(
    urls: dict[str, str], samples: list[tuple[float, dict[str, tuple[int, int]]]]
) -> None:
    """Each replica's free places and waiting sessions, every SAMPLE_S, until cancelled."""
    async with aiohttp.ClientSession() as http:
        while True:
            at, state = time.monotonic(), {}
            for route, url in urls.items():
                try:
                    async with http.get(url, timeout=aiohttp.ClientTimeout(total=1)) as reply:
                        body = await reply.json(content_type=None)
                    state[route] = (int(body.get("free", 0)), int(body.get("queued", 0)))
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    continue
            samples.append((at, state))
            await asyncio.sleep(SAMPLE_S)


async def run_load(
    cluster: Cluster, plan: Plan, replicas: int, load: float, seed: int
) -> dict[str, object]:
    rng = random.Random(seed)
    audio = rng.randbytes(pcm16_bytes(CHUNK_MS, 24000))
    rate = load * replicas * plan.capacity / plan.mean_s
    records: list[Record] = []
    tasks: list[asyncio.Task[None]] = []
    samples: list[tuple[float, dict[str, tuple[int, int]]]] = []
    sampler = (
        asyncio.create_task(sample_room(cluster.health_urls, samples)) if replicas > 1 else None
    )
    end = time.monotonic() + plan.arrivals_s
    while (now := time.monotonic()) < end:
        record = Record("gold" if rng.random() < GOLD_SHARE else "standard")
        records.append(record)
        length = rng.uniform(plan.mean_s / 2, plan.mean_s * 1.5)
        tasks.append(asyncio.create_task(one_session(cluster.target, record, length, audio)))
        await asyncio.sleep(min(rng.expovariate(rate), max(0.0, end - now)))
    limit = plan.max_wait_s + plan.mean_s * 1.5 + 60
    _, pending = await asyncio.wait(tasks, timeout=limit)
    for task in pending:
        task.cancel()
    for record, task in zip(records, tasks, strict=True):
        if task in pending and not record.lost:
            record.lost = "still running at the end"
    if sampler is not None:
        sampler.cancel()
    return summary(records, plan, samples, replicas, load)


# -- the figures ----------------------------------------------------------------------------


def pct(values: Sequence[float], q: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return quantiles(values, n=100, method="inclusive")[q - 1]


def order_violations(records: Sequence[Record], slack_s: float) -> int:
    violations = 0
    waited = [r for r in records if r.waited and r.route]
    for earlier in waited:
        told_at = earlier.notices[0][0]
        for later in waited:
            if (
                later is not earlier
                and later.klass == earlier.klass
                and later.route == earlier.route
                and later.opened_at > told_at
                and later.created_at is not None
                and later.created_at < earlier.ended_at - slack_s
            ):
                violations += 1
    return violations


def misplaced_spans(
    samples: Sequence[tuple[float, dict[str, tuple[int, int]]]],
) -> tuple[float, float]:
    """The longest time one replica held waiting sessions while another had a free place, and
    the time so in all (any replica)."""
    longest = total = 0.0
    since: dict[str, float] = {}
    previous = None
    for at, state in samples:
        for route, (_, queued) in state.items():
            room_elsewhere = any(free > 0 for other, (free, _) in state.items() if other != route)
            if queued > 0 and room_elsewhere:
                since.setdefault(route, at)
                longest = max(longest, at - since[route])
            else:
                since.pop(route, None)
        if previous is not None and since:
            total += at - previous
        previous = at
    return longest, total


def queued_while_room(
    records: Sequence[Record], samples: Sequence[tuple[float, dict[str, tuple[int, int]]]]
) -> tuple[int, int]:
    """Of the new sessions that were queued, those queued on one replica while another had had
    a free place for longer than a check interval (in every sample of that interval)."""
    misplaced = queued = 0
    for record in records:
        if not record.notices or not record.route:
            continue
        queued += 1
        told_at = record.notices[0][0]
        window = [state for at, state in samples if told_at - CHECK_S - SAMPLE_S <= at <= told_at]
        others = {route for state in window for route in state} - {record.route}
        if len(window) >= 2 and any(
            all(state.get(route, (0, 0))[0] > 0 for state in window) for route in others
        ):
            misplaced += 1
    return misplaced, queued


def summary(
    records: Sequence[Record], plan: Plan, samples: Sequence, replicas: int, load: float
) -> dict[str, object]:
    admitted = [r for r in records if r.created_at is not None]
    waits = [r.wait_s for r in admitted]
    factors = []
    for r in admitted:
        if r.waited:
            estimate = max(r.notices[0][2], FLOOR_S)
            actual = max(r.created_at - r.notices[0][0], FLOOR_S)  # type: ignore[operator]
            factors.append(max(estimate / actual, actual / estimate))
    period_s = CHUNK_MS / 1000
    real_time = sum(1 for r in admitted if r.rtts and pct(r.rtts, 99) <= period_s)
    longest, total = misplaced_spans(samples) if samples else (float("nan"), float("nan"))
    misplaced, queued = queued_while_room(records, samples) if samples else (0, 0)
    return {
        "replicas": replicas,
        "load": load,
        "arrivals": len(records),
        "admitted": len(admitted),
        "waited": sum(1 for r in admitted if r.waited),
        "wait_p50_s": pct(waits, 50),
        "wait_p99_s": pct(waits, 99),
        "estimate_factor_p50": pct(factors, 50),
        "estimate_factor_p90": pct(factors, 90),
        "estimate_within_2x": (sum(f <= 2 for f in factors) / len(factors))
        if factors
        else float("nan"),
        "order_violations": order_violations(records, plan.order_slack_s),
        "real_time": real_time,
        "refused": dict(Counter(r.refused for r in records if r.refused)),
        "lost": sum(1 for r in records if r.lost),
        "lost_reasons": sorted({r.lost for r in records if r.lost})[:5],
        "queued_while_room": misplaced,
        "queued": queued,
        "misplaced_longest_s": longest,
        "misplaced_total_s": total,
    }


def row(s: dict[str, object]) -> list[str]:
    refused = s["refused"]
    assert isinstance(refused, dict)
    by_reason = ", ".join(f"{k} {v}" for k, v in sorted(refused.items())) or "0"
    misplaced = (
        "-"
        if s["replicas"] == 1
        else f"{s['queued_while_room']} of {s['queued']} (a replica waited while room: "
        f"{s['misplaced_longest_s']:.2f} s longest)"
    )
    return [
        str(s["replicas"]),
        f"{s['load']:g}x",
        str(s["arrivals"]),
        f"{s['admitted']} ({s['waited']} waited)",
        f"{s['wait_p50_s']:.2f} / {s['wait_p99_s']:.2f} s",
        f"{s['estimate_factor_p50']:.2f} / {s['estimate_factor_p90']:.2f}"
        f" ({100 * s['estimate_within_2x']:.0f} % within 2x)",  # type: ignore[operator]
        str(s["order_violations"]),
        f"{s['real_time']}/{s['admitted']}",
        by_reason,
        str(s["lost"]),
        misplaced,
    ]


HEADER = [
    "replicas",
    "load",
    "arrivals",
    "admitted",
    "wait p50 / p99",
    "estimate factor p50 / p90",
    "order violations in a class",
    "real time",
    "refused by reason",
    "lost",
    f"new sessions queued while room elsewhere > {AGENT_INTER}",
]


async def bench(args: argparse.Namespace) -> int:
    load_before = os.getloadavg()
    harness.raise_open_file_limit()
    plan = (
        Plan(
            capacity=2,
            mean_s=2.0,
            arrivals_s=8.0,
            max_wait_s=6.0,
            max_length=16,
            order_slack_s=args.order_slack_ms / 1000,
        )
        if args.quick
        else Plan(
            capacity=4,
            mean_s=6.0,
            arrivals_s=60.0,
            max_wait_s=30.0,
            max_length=32,
            order_slack_s=args.order_slack_ms / 1000,
        )
    )
    print(
        f"capacity {plan.capacity} per replica, sessions of {plan.mean_s / 2:g} to "
        f"{plan.mean_s * 1.5:g} s, arrivals for {plan.arrivals_s:g} s per load, longest wait "
        f"{plan.max_wait_s:g} s, queue of {plan.max_length} per replica",
        flush=True,
    )
    summaries = []
    with tempfile.TemporaryDirectory(prefix="omni-bench-admission-") as tmp:
        for replicas in args.replicas:
            cluster = Cluster(replicas, plan, Path(tmp))
            try:
                await cluster.ready()
                for index, load in enumerate(LOADS):
                    s = await run_load(cluster, plan, replicas, load, seed=args.seed + index)
                    summaries.append(s)
                    print(
                        f"  {replicas} replica(s) at {load:g}x: " + " | ".join(row(s)[2:]),
                        flush=True,
                    )
                    if s["lost_reasons"]:
                        print(f"    lost: {s['lost_reasons']}", flush=True)
                    await asyncio.sleep(plan.mean_s)  # the last sessions' places free
            finally:
                cluster.stop()
    harness.print_table(HEADER, [row(s) for s in summaries])
    harness.print_load_average(load_before)
    if args.json:
        harness.print_json({"plan": dataclasses.asdict(plan), "runs": summaries})
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of about three minutes")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 3], help="default: 1 3")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--order-slack-ms",
        type=float,
        default=50.0,
        help="two admissions this close may reach their clients in either order (default 50)",
    )
    parser.add_argument("--json", action="store_true", help=harness.JSON_HELP)
    args = parser.parse_args(argv)
    return harness.run(bench(args))


if __name__ == "__main__":
    sys.exit(main())
