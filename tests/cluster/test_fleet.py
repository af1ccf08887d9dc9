"""The fleet under fire, small: scripts/bench_fleet.py's run (three replicas behind HAProxy with
``--durability sync`` and ``--restart always``, spoken turns at real-time pace through the Python
resuming client) with 8 sessions, client cuts mid-audio and mid-answer (clean closes and dropped
TCP connections), and a replica killed (SIGKILL) and restarted while they talk. Every check of
the benchmark must hold: events contiguous and none doubled, every turn ended, the committed
audio whole and each completed answer as long as it, every command applied once.
"""

from __future__ import annotations

from pathlib import Path

from tests.scripts import load_script


async def test_a_small_fleet_under_cuts_and_a_kill_loses_nothing(tmp_path: Path) -> None:
    fleet = load_script("bench_fleet")
    settings = fleet.Settings(sessions=8, turns=2, cuts=3, kill_every_s=6.0, ramp_s=2.0, seed=3)
    report = await fleet.run_fleet(settings, tmp_path)
    for name, figure in fleet.rows(report, settings):
        print(f"{name}: {figure}")
    assert report.kills >= 1 and report.restarts >= 1, "no replica was killed and restarted"
    assert sum(report.cuts.values()) >= settings.sessions, report.cuts
    assert report.turns == settings.sessions * settings.turns
    assert not report.problems, report.problems
