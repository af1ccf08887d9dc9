"""One benchmark run: every server measured side by side, interleaved step by step.

A run measures, in this order, each part interleaved across the loads (raw, ours, raw, ours...)
so that whatever else the machine does meanwhile weighs on all of them alike:

1. one paced session of 20 ms chunks per load: the latency a hop adds;
2. server CPU per chunk at fixed paced loads (:data:`FIXED_SESSIONS` of 20 ms chunks), the
   median of :data:`TRIALS` steps, with the load generator's CPU and, where the server meters
   it (:mod:`.meter`), the mirror engine's own share;
3. a capacity search per load and chunk length (:class:`~.search.Search`), trial by trial.

:class:`Results` holds it all and writes the ``--json`` document.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from omni_grpc.bench import harness
from omni_grpc.bench.search import Capacity, Search, us_per_chunk

FIXED_SESSIONS = (10, 100)
FIXED_CHUNK_MS = 20
TRIALS = 3  # steps per fixed load, and per capacity point (a point passes when most keep up)
REFINE = 6  # bisection steps at most, per search
SATURATED = 0.9  # a server using this much of its core is at its limit


class SteppedLoad(Protocol):
    """One kind of load against one server: what :func:`measure` drives."""

    kind: str
    server_pid: int

    async def step(self, sessions: int, chunk_ms: int, duration_s: float) -> harness.Tally: ...


# Where each capacity search starts and stops, by chunk length and load kind.
Searches = dict[int, dict[str, tuple[int, int]]]


@dataclass
class Cost:
    """Server CPU per chunk of one load at one fixed number of sessions (medians of trials)."""

    sessions: int
    us_per_chunk: float
    engine_us_per_chunk: float  # the mirror engine's own share of it; nan where not metered
    client_cpu: float  # the load generator's share of its core
    p99_ms: float
    # Most of its steps used a whole core or lost answers: work left queued at the end of the
    # window is not in its CPU, which then understates what the load costs. (Not the p99: on
    # a shared machine a server far from its limit can miss it.)
    saturated: bool

    @property
    def cells(self) -> tuple[float, float, bool]:
        """What :func:`harness.cost_rows` shows of it."""
        return self.us_per_chunk, self.engine_us_per_chunk, self.saturated

    @property
    def gateway_us_per_chunk(self) -> float:
        """What the server spends on a chunk besides its engine."""
        return self.us_per_chunk - (
            0.0 if math.isnan(self.engine_us_per_chunk) else self.engine_us_per_chunk
        )


@dataclass
class Results:
    single: dict[str, harness.Tally]  # by kind
    costs: dict[tuple[str, int], Cost]  # by (kind, sessions)
    caps: dict[tuple[str, int], Capacity]  # by (kind, chunk ms)

    def document(
        self,
        benchmark: str,
        header: Sequence[str],
        rows: Sequence[Sequence[str]],
        load_before: tuple[float, float, float],
    ) -> dict[str, Any]:
        """Everything measured, for ``--json``: figures as numbers, and the table as printed."""
        return {
            "benchmark": benchmark,
            "cpus": os.cpu_count(),
            "load_average": {"before": load_before, "after": os.getloadavg()},
            "one_session_20ms": {
                kind: {"p50_ms": t.p50, "p99_ms": t.p99, "received": t.received, "sent": t.sent}
                for kind, t in self.single.items()
            },
            "cpu_per_chunk": [
                {
                    "kind": kind,
                    "sessions": sessions,
                    "chunk_ms": FIXED_CHUNK_MS,
                    "server_us": cost.us_per_chunk,
                    "engine_us": _number(cost.engine_us_per_chunk),
                    "gateway_us": cost.gateway_us_per_chunk,
                    "client_cpu": cost.client_cpu,
                    "p99_ms": cost.p99_ms,
                    "saturated": cost.saturated,
                }
                for (kind, sessions), cost in self.costs.items()
            ],
            "capacity": [
                {
                    "kind": kind,
                    "chunk_ms": chunk_ms,
                    "sessions": cap.sessions,
                    "ladder_top": cap.at_top,
                    "client_bound": cap.client_bound,
                    "server_us_per_chunk": _number(cap.us_per_chunk),
                    "trials": [{"sessions": n, "kept_up": ok} for n, ok in cap.trials],
                }
                for (kind, chunk_ms), cap in self.caps.items()
            ],
            "table": {"header": list(header), "rows": [list(row) for row in rows]},
        }


def _saturated(tally: harness.Tally) -> bool:
    return tally.server_cpu >= SATURATED or tally.received < 0.99 * tally.owed


def _number(value: float) -> float | None:
    """JSON has no nan."""
    return None if math.isnan(value) else value


async def measure(loads: Sequence[SteppedLoad], searches: Searches, *, quick: bool) -> Results:
    """Runs the three parts (see the module docstring). A quick run takes one short step per
    fixed load and one step of 4 sessions per search: it proves the paths work, it measures
    nothing."""
    trials = 1 if quick else TRIALS
    if quick:
        searches = {chunk: {load.kind: (4, 4) for load in loads} for chunk in searches}
    single: dict[str, harness.Tally] = {}
    print("one session, 20 ms chunks:")
    for load in loads:
        single[load.kind] = one = await load.step(1, 20, 1.0 if quick else 5.0)
        print(harness.single_line(load.kind, one), flush=True)
    costs = await fixed_costs(loads, (10,) if quick else FIXED_SESSIONS, trials, quick)
    caps: dict[tuple[str, int], Capacity] = {}
    for chunk_ms, search in searches.items():
        print(f"capacity, {chunk_ms} ms chunks:", flush=True)
        running = {
            load.kind: Search(
                chunk_ms=chunk_ms,
                start=search[load.kind][0],
                top=search[load.kind][1],
                trials=trials,
                refine=0 if quick else REFINE,
            )
            for load in loads
        }
        while pending := [load for load in loads if running[load.kind].at is not None]:
            for load in pending:  # one trial each, in turn
                at = running[load.kind].at
                assert at is not None
                await harness.settle(load.server_pid)
                tally = await load.step(at, chunk_ms, 1.0 if quick else 3.0)
                print(harness.step_line(load.kind, chunk_ms, tally), flush=True)
                running[load.kind].record(tally)
        caps.update({(kind, chunk_ms): s.capacity for kind, s in running.items()})
    return Results(single, costs, caps)


async def fixed_costs(
    loads: Sequence[SteppedLoad], fixed: Sequence[int], trials: int, quick: bool
) -> dict[tuple[str, int], Cost]:
    costs: dict[tuple[str, int], Cost] = {}
    for sessions in fixed:
        print(f"server CPU per chunk, {sessions} sessions x {FIXED_CHUNK_MS} ms:", flush=True)
        steps: dict[str, list[harness.Tally]] = {load.kind: [] for load in loads}
        for _ in range(trials):
            for load in loads:
                await harness.settle(load.server_pid)
                tally = await load.step(sessions, FIXED_CHUNK_MS, 1.0 if quick else 4.0)
                print(harness.step_line(load.kind, FIXED_CHUNK_MS, tally), flush=True)
                steps[load.kind].append(tally)
        for kind, tallies in steps.items():
            per_chunk = FIXED_CHUNK_MS / (sessions * 1000) * 1e6  # share of a core -> us/chunk
            costs[(kind, sessions)] = Cost(
                sessions=sessions,
                us_per_chunk=statistics.median(us_per_chunk(t, FIXED_CHUNK_MS) for t in tallies),
                engine_us_per_chunk=statistics.median(t.engine_cpu * per_chunk for t in tallies),
                client_cpu=statistics.median(t.client_cpu for t in tallies),
                p99_ms=statistics.median(t.p99 for t in tallies),
                saturated=sum(map(_saturated, tallies)) * 2 > len(tallies),
            )
    return costs
