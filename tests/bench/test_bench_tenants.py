"""The noisy-neighbour benchmark runs end to end in its quick mode: the victim is served."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.subprocess  # the benchmark script, run as a user runs it
def test_the_quick_run_measures_the_victim_with_and_without_an_attack() -> None:
    command = [sys.executable, "scripts/bench_tenants.py", "--quick", "--json"]
    result = subprocess.run(
        [*command, "--only", "client-secrets"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {row["attack"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {"none", "client-secrets"}
    for row in rows.values():
        assert row["answered"] > 0 and row["p99_ms"] > 0
        assert row["refusals"] == [], row  # the victim's mint, open and heartbeats all went
        assert row["peak_mib"] > 0 and row["budget_mib"] == 128
