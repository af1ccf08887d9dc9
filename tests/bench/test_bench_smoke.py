"""Both transport benchmarks run end to end in their quick mode and print their tables.

``omni-grpc bench`` (the gRPC service against a raw grpc.aio echo, from the package) and
``scripts/bench_bridge.py`` (the websocket bridge against a raw websocket echo) share the
benchmark kit, so their progress lines and tables have the same shape. The peer benchmark
(``scripts/bench_peer.py``, against vLLM-Omni's own server) needs ``.venv-vllm-omni``, so its
smoke test is the vLLM tier's: tests/vllm/omni/test_bench_peer.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Each runs a benchmark as a child process.
pytestmark = pytest.mark.subprocess

REPO = Path(__file__).resolve().parents[2]
NUMBER = r"\d+\.\d+"
KINDS = ("raw", "grpc", "bridge")


def _quick_run(
    command: list[str], kinds: tuple[str, ...], *, as_json: bool = False
) -> tuple[list[str], dict[str, Any]]:
    """Runs a quick benchmark; checks what every run must show; returns its table rows and,
    with ``as_json``, its JSON document (then the only thing on stdout)."""
    result = subprocess.run(
        [*command, "--quick", *(["--json"] if as_json else [])],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
    )
    out = result.stderr if as_json else result.stdout
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout) if as_json else {}
    # One session on each path got every chunk back, answered in order.
    for kind in kinds:
        match = re.search(
            rf"^  {kind} *: p50 +{NUMBER} ms +p99 +{NUMBER} ms +got (\d+)/(\d+)$", out, re.M
        )
        assert match, f"no one-session line for {kind}:\n{out}"
        assert match[1] == match[2] and int(match[1]) > 0
    # Every capacity step was measured, without refused or lost chunks at four sessions.
    steps = re.findall(r"^  (\w+) +(\d+) ms x +4: .* got (\d+)/(\d+) .*$", out, re.M)
    assert {(kind, chunk) for kind, chunk, _, _ in steps} == {
        (kind, chunk) for kind in kinds for chunk in ("20", "100")
    }
    assert all(got == sent for _, _, got, sent in steps), out
    assert "errors" not in out
    assert re.search(rf"^load average .*: {NUMBER} ", out, re.M)
    table = [line for line in out.splitlines() if line.startswith("|")]
    # The capacity rows for both chunk sizes (a quick run's one step at four sessions may
    # miss the p99 bound on a busy machine, so no capacity is asserted) and the CPU rows.
    for chunk in (20, 100):
        assert any(
            re.match(
                rf"\| paced sessions, p99 < 50 ms, {chunk} ms chunks \| \d+ .*\| {NUMBER}x \|", row
            )
            for row in table
        ), table
        cpu = next(r for r in table if r.startswith(f"| server CPU per chunk, {chunk} ms"))
        assert len(re.findall(r"\d+ us \(\d+\)", cpu)) == len(kinds), cpu
    # Server CPU per chunk at a fixed load of ten sessions, every server measured, and the
    # mirror engine's own share where ours runs it (the raw servers have no engine).
    fixed = next(r for r in table if r.startswith("| server CPU per chunk, 10 paced sessions"))
    assert len(re.findall(r"\| \d+ us ", fixed)) == len(kinds), fixed
    engine = next(r for r in table if "of which the engine's own, 10 sessions" in r)
    assert len(re.findall(r"\| \d+ us ", engine)) == len(kinds) - 1, engine
    assert any("load generator's CPU, 10 sessions" in r for r in table)
    return table, document


@pytest.mark.slow
def test_grpc_benchmark_runs_from_the_package() -> None:
    table, _ = _quick_run([sys.executable, "-m", "omni_cli", "bench"], ("echo", "ours"))
    assert table[0].startswith("| measure | raw echo | ours |")
    for name in ("p50", "p99"):
        row = next(r for r in table if r.startswith(f"| chunk round trip {name}, 1 session"))
        assert len(re.findall(rf"{NUMBER} ms", row)) == 3, row
    resume = next(r for r in table if r.startswith("| resume: new stream to first replayed"))
    assert re.search(rf"\| {NUMBER} ms \|", resume), resume
    memory = next(r for r in table if r.startswith("| server memory per idle session"))
    assert re.search(rf"\| -?{NUMBER} KiB \|", memory), memory


@pytest.mark.slow
def test_bridge_benchmark_measures_every_path() -> None:
    script = str(REPO / "scripts" / "bench_bridge.py")
    table, document = _quick_run([sys.executable, script], KINDS, as_json=True)
    assert table[0].startswith("| measure | raw ws echo | ours, gRPC | ours, bridge |")
    for name in ("p50", "p99"):
        row = next(r for r in table if r.startswith(f"| chunk round trip {name}, 1 session"))
        assert len(re.findall(rf"{NUMBER} ms", row)) == 4, row
        assert any(
            r.startswith(f"| added by the bridge hop (bridge - gRPC), {name}") for r in table
        )
    # The JSON document holds the same run: the table as printed, and every figure as a number.
    assert document["benchmark"] == "bridge"
    assert document["table"]["rows"] == [row[2:-2].split(" | ") for row in table[2:]]
    fixed = {(c["kind"], c["sessions"]): c for c in document["cpu_per_chunk"]}
    assert set(fixed) == {(kind, 10) for kind in KINDS}
    assert fixed[("raw", 10)]["engine_us"] is None
    for kind in ("grpc", "bridge"):
        cost = fixed[(kind, 10)]
        assert 0 < cost["engine_us"] < cost["server_us"]
        assert cost["gateway_us"] == cost["server_us"] - cost["engine_us"]
    searches = {(c["kind"], c["chunk_ms"]): c["trials"] for c in document["capacity"]}
    assert set(searches) == {(kind, chunk) for kind in KINDS for chunk in (20, 100)}
    assert all(
        trials == [{"sessions": 4, "kept_up": trials[0]["kept_up"]}] for trials in searches.values()
    )


@pytest.mark.slow
def test_bridge_benchmark_with_two_processes_puts_both_to_work() -> None:
    """``--workers``: ``omni-grpc serve`` with one bridge process and with two
    (``--bridge-workers 2``), side by side; with two, the kernel spreads the connections over
    both processes, and each one's CPU is its own figure."""
    script = str(REPO / "scripts" / "bench_bridge.py")
    result = subprocess.run(
        [sys.executable, script, "--workers", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for kind in ("bridge-1", "bridge-2"):
        match = re.search(
            rf"^  {kind} *: p50 +{NUMBER} ms +p99 +{NUMBER} ms +got (\d+)/(\d+)$",
            result.stdout,
            re.M,
        )
        assert match and match[1] == match[2] and int(match[1]) > 0, result.stdout
    table = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert table[0].startswith("| measure | 1 process | 2 processes | 2 / 1 |")
    # 20 sessions over two processes: both carry some (all on one is a 2 ** -19 chance).
    split = next(r for r in table if r.startswith("| CPU of each process, 20 sessions"))
    shares = re.findall(r"(\d+)%", split)
    assert len(shares) == 2 and all(int(share) > 0 for share in shares), split
