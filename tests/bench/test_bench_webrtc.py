"""``scripts/bench_webrtc.py`` runs end to end in its quick mode: both kinds of session carried
audio both ways, and its tables say how much CPU each took and how long the round trip was."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess  # the server runs as a child process

REPO = Path(__file__).resolve().parents[2]


def test_webrtc_benchmark_measures_both_carriers() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_webrtc.py"), "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^load average before: \d+\.\d+", out, re.M)
    rows = re.findall(r"^\| (\d+) \| (\d+\.\d+) % \| (\d+\.\d+) % \| (\d+\.\d)x \|$", out, re.M)
    assert [int(sessions) for sessions, *_ in rows] == [1, 2], out
    assert all(float(ws) > 0 and float(rtc) > 0 for _, ws, rtc, _ in rows), out
    for kind in ("websocket", "webrtc"):
        match = re.search(rf"^\| {kind} \| (\d+\.\d) \| (\d+\.\d) \| (\d+) \|$", out, re.M)
        assert match and int(match[3]) > 0, out  # answers came back and were timed
    # The search for sessions per core within 50 ms of added p99: each kind tried at 2 (and
    # on, while within the bound), and what one core carries within it, when any count was.
    for kind in ("websocket", "webrtc"):
        steps = re.findall(rf"^\| {kind} \| (\d+) \| (\d+\.\d+) \| (\d+\.\d) \(", out, re.M)
        assert steps and steps[0][0] == "2" and float(steps[0][1]) > 0, out
        within = re.search(
            rf"^\| {kind}: within 50 ms \| (\d+) \| \d+\.\d+ \| (\d+) per core", out, re.M
        )
        over = re.search(rf"^\| {kind} \| \d+ \| \d+\.\d+ \| .*\(over\) \|$", out, re.M)
        assert within or over, out  # either a count was within the bound, or the first passed it
