"""The bridge benchmark runs end to end in its quick mode and prints its table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_bridge.py"
NUMBER = r"\d+\.\d+"


@pytest.mark.slow
def test_quick_run_measures_every_path_and_prints_the_table() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=60
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    # One session on each path got every chunk back, answered in order.
    for kind in ("raw", "grpc", "bridge"):
        match = re.search(
            rf"^  {kind} *: p50 +{NUMBER} ms +p99 +{NUMBER} ms +got (\d+)/(\d+)$", out, re.M
        )
        assert match, f"no one-session line for {kind}:\n{out}"
        assert match[1] == match[2] and int(match[1]) > 0
    # Every capacity step was measured, without refused or lost chunks at four sessions.
    steps = re.findall(r"^  (\w+) +(\d+) ms x +4: .* got (\d+)/(\d+) .*$", out, re.M)
    assert {(kind, chunk) for kind, chunk, _, _ in steps} == {
        (kind, chunk) for kind in ("raw", "grpc", "bridge") for chunk in ("20", "100")
    }
    assert all(got == sent for _, _, got, sent in steps), out
    assert "errors" not in out
    # The table: capacity rows for both chunk sizes (a quick run's one step at four sessions
    # may miss the p99 bound on a busy machine, so no capacity is asserted), CPU, latency.
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert table[0].startswith("| measure | raw ws echo | ours, gRPC | ours, bridge |")
    for chunk in (20, 100):
        assert any(
            re.match(
                rf"\| paced sessions, p99 < 50 ms, {chunk} ms chunks \| \d+ .*\| {NUMBER}x \|", row
            )
            for row in table
        ), table
        cpu = next(r for r in table if r.startswith(f"| server CPU per chunk, {chunk} ms"))
        assert len(re.findall(r"\d+ us \(\d+\)", cpu)) == 3, cpu
    for name in ("p50", "p99"):
        row = next(r for r in table if r.startswith(f"| chunk round trip {name}, 1 session"))
        assert len(re.findall(rf"{NUMBER} ms", row)) == 4, row
        assert any(
            r.startswith(f"| added by the bridge hop (bridge - gRPC), {name}") for r in table
        )
    assert re.search(rf"^load average .*: {NUMBER} ", out, re.M)
