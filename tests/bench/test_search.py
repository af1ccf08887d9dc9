"""The capacity search: doubling, then bisection, each point decided by most of its trials."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from omni_grpc.bench.search import RESOLUTION, Search


@dataclass
class Step:
    """A paced step as the search reads it."""

    sessions: int
    kept_up: bool
    server_cpu: float = 0.5
    client_cpu: float = 0.3


def run(search: Search, keeps_up: Callable[[int, int], bool]) -> list[int]:
    """Drives a search to its end; ``keeps_up(sessions, trial)``; returns the points tried."""
    tried, trial = [], 0
    while (at := search.at) is not None:
        tried.append(at)
        search.record(Step(at, keeps_up(at, trial)))
        trial += 1
    return tried


def test_doubles_then_bisects_to_within_the_resolution() -> None:
    search = Search(chunk_ms=20, start=16, top=4096, trials=1, refine=20)
    run(search, lambda sessions, _: sessions <= 300)
    cap = search.capacity
    assert 300 * (1 - RESOLUTION) <= cap.sessions <= 300
    assert not cap.at_top and not cap.client_bound


def test_a_point_is_decided_by_most_of_its_trials() -> None:
    # Every point up to 100 fails its first trial only (a hiccup of the machine), every point
    # above passes only its first: two of three decide, so the hiccups change nothing.
    search = Search(chunk_ms=20, start=25, top=4096, trials=3, refine=20)
    seen: dict[int, int] = {}

    def flaky(sessions: int, _: int) -> bool:
        seen[sessions] = seen.get(sessions, 0) + 1
        first = seen[sessions] == 1
        return not first if sessions <= 100 else first

    tried = run(search, flaky)
    assert tried[:6] == [25, 25, 25, 50, 50, 50]  # each point tried until two agree
    assert 95 <= search.capacity.sessions <= 100
    assert search.capacity.trials[0] == (25, False)


def test_a_search_that_never_fails_stops_at_its_top() -> None:
    search = Search(chunk_ms=20, start=16, top=100, trials=3, refine=5)
    assert run(search, lambda *_: True) == [16, 16, 32, 32, 64, 64, 100, 100]
    assert search.capacity.sessions == 100 and search.capacity.at_top


def test_a_failing_start_bisects_down_and_the_cost_comes_from_the_passing_point() -> None:
    search = Search(chunk_ms=20, start=64, top=1024, trials=1, refine=10)
    run(search, lambda sessions, _: sessions <= 10)
    cap = search.capacity
    assert 9 <= cap.sessions <= 10
    # 0.5 of a core for the passing point's sessions, each sending 50 chunks a second.
    assert cap.us_per_chunk == 0.5 * 1e6 / (cap.sessions * 50)


def test_a_saturated_load_generator_is_named() -> None:
    search = Search(chunk_ms=20, start=8, top=64, trials=1, refine=0)
    while (at := search.at) is not None:
        search.record(Step(at, at < 32, client_cpu=0.95 if at >= 32 else 0.5))
    assert search.capacity.sessions == 16 and search.capacity.client_bound
    assert search.capacity.cell() == "16 (client-bound)"
