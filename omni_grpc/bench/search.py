"""Capacity by bisection with repeated trials: the most paced sessions a server keeps up.

A :class:`Search` is a state machine, not a loop, so that a benchmark can interleave the
searches of several servers trial by trial (raw, ours, raw, ours...): whatever else the machine
does during the run then weighs on every server alike. Each point (a session count) is tried
until most of its ``trials`` agree; one lucky or unlucky step does not decide it. The search
doubles from ``start`` until a point fails or ``top`` passes, then bisects between the last
pass and the first failure until they are within :data:`RESOLUTION` of each other.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Protocol

RESOLUTION = 0.05  # bisection stops when the failure is within 5% of the pass
CLIENT_BOUND = 0.9  # a load generator using this much of its core may be what failed


class Trial(Protocol):
    """What a search reads of one paced step (a :class:`~omni_grpc.bench.harness.Tally`)."""

    sessions: int
    server_cpu: float
    client_cpu: float

    @property
    def kept_up(self) -> bool: ...


def us_per_chunk(trial: Trial, chunk_ms: int) -> float:
    """Server CPU per chunk of one step, in microseconds."""
    return trial.server_cpu * 1e6 / (trial.sessions * 1000 / chunk_ms)


@dataclass
class Capacity:
    sessions: int = 0  # the most sessions kept up
    at_top: bool = False  # the search never failed: the server may hold more
    client_bound: bool = False  # the load generator was saturated at the first failing point
    # Server CPU per chunk at the largest point kept up (the median of its passing trials; if
    # none passed, the first trial's). Unlike latency it barely moves with load: a projection.
    us_per_chunk: float = float("nan")
    trials: list[tuple[int, bool]] = field(default_factory=list)  # (sessions, kept up), in order

    def per_core(self, chunk_ms: int) -> float:
        """Sessions that would take 70% of one core (where tails stay short), by CPU alone."""
        if not self.us_per_chunk or math.isnan(self.us_per_chunk):
            return 0.0
        return 0.7e6 / (self.us_per_chunk * 1000 / chunk_ms)

    def cell(self) -> str:
        """The capacity as a table cell, with what limited the search."""
        note = " (ladder top)" if self.at_top else " (client-bound)" if self.client_bound else ""
        return f"{self.sessions}{note}"


class Search:
    """One server's capacity search at one chunk length; see the module docstring."""

    def __init__(self, *, chunk_ms: int, start: int, top: int, trials: int, refine: int) -> None:
        self.chunk_ms, self.top, self.trials, self.refine = chunk_ms, top, trials, refine
        self.at: int | None = min(max(start, 1), top)  # the point being tried; None: done
        self.passed, self.failed = 0, None  # type: int, int | None
        self.capacity = Capacity()
        self._point: list[Trial] = []  # the trials of the current point

    def record(self, trial: Trial) -> None:
        """Books one trial of the current point; moves on once most trials agree."""
        assert self.at is not None, "the search is done"
        self._point.append(trial)
        self.capacity.trials.append((trial.sessions, trial.kept_up))
        if math.isnan(self.capacity.us_per_chunk):
            self.capacity.us_per_chunk = us_per_chunk(trial, self.chunk_ms)
        majority = self.trials // 2 + 1
        wins = sum(t.kept_up for t in self._point)
        if wins >= majority:
            self.passed = self.at
            costs = [us_per_chunk(t, self.chunk_ms) for t in self._point if t.kept_up]
            self.capacity.us_per_chunk = statistics.median(costs)
        elif len(self._point) - wins >= majority:
            self.failed = self.at
            self.capacity.client_bound = any(t.client_cpu >= CLIENT_BOUND for t in self._point)
        else:
            return
        self._point = []
        self.at = self._next()
        if self.at is None:
            self.capacity.sessions = self.passed
            self.capacity.at_top = self.failed is None

    def _next(self) -> int | None:
        if self.failed is None:
            return None if self.passed >= self.top else min(self.passed * 2, self.top)
        if self.failed - self.passed <= max(1, self.passed * RESOLUTION) or self.refine <= 0:
            return None
        self.refine -= 1
        return (self.passed + self.failed) // 2
