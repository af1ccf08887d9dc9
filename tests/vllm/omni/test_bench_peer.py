"""The peer benchmark (``scripts/bench_peer.py``: our bridge against vLLM-Omni's own duplex
websocket server) runs end to end in its quick mode and prints what it measured.

It is the vLLM tier's (marked ``vllm_omni``): its peer runs in ``.venv-vllm-omni``, which only
that tier makes (scripts/vllm_tier.sh). The benchmark itself runs as a person runs it, from the
main ``.venv``, and starts its peer in ``.venv-vllm-omni``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.vllm_omni, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
MAIN_PYTHON = REPO / ".venv" / "bin" / "python"


@pytest.mark.timeout(300)
def test_peer_benchmark_loads_vllm_omni_and_our_bridge_alike() -> None:
    assert MAIN_PYTHON.exists(), "the main .venv is missing: scripts/test makes it"
    assert (REPO / ".venv-vllm-omni" / "bin" / "python").exists(), "scripts/vllm_tier.sh makes it"
    result = subprocess.run(
        [str(MAIN_PYTHON), str(REPO / "scripts" / "bench_peer.py"), "--quick", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # The run fails itself when one session misses an answer it is owed, on either server.
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    document = json.loads(result.stdout)
    assert document["benchmark"] == "peer"
    one = document["one_session_20ms"]
    assert one["bridge"]["received"] == one["bridge"]["sent"]
    assert one["vllm-omni"]["received"] >= 1  # a second of input: one model unit, answered
    # Both servers measured at the fixed load, each with its engine's own share: our mirror's
    # and vLLM-Omni's stage stand-in's.
    fixed = {c["kind"]: c for c in document["cpu_per_chunk"]}
    assert set(fixed) == {"vllm-omni", "bridge"}
    for cost in fixed.values():
        assert 0 < cost["engine_us"] < cost["server_us"]
    rows = document["table"]["rows"]
    assert rows[0][0] == "server CPU per chunk, 10 paced sessions, 20 ms chunks"
    assert any(row[0].startswith("sessions sustained, p99 answer < 50 ms, 100 ms") for row in rows)
