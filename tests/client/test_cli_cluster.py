"""The settings of a replica behind a proxy: ``--route``, ``--durability``, ``--redis-url``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from omni_cli import build_parser, cluster
from omni_cli.cluster import haproxy_config, program, redis_command
from omni_cli.config import ConfigError, resolve_serve_settings

ROOT = Path(__file__).resolve().parents[2]


def test_durability_is_off_by_default_and_layers_like_every_setting(tmp_path: Path) -> None:
    defaults = resolve_serve_settings(build_parser().parse_args(["serve"]), {})
    assert (defaults.server.durability, defaults.server.route) == ("off", "")
    assert defaults.server.redis_url == "redis://127.0.0.1:6379/0"
    config = tmp_path / "omni.toml"
    config.write_text('durability = "sync"\nroute = "r9"\n')
    args = build_parser().parse_args(["serve", "--config", str(config), "--route", "r1"])
    environ = {"OMNI_GRPC_DURABILITY": "async", "OMNI_GRPC_REDIS_URL": "redis://redis:6379/2"}
    resolved = resolve_serve_settings(args, environ)
    assert resolved.server.durability == "async"  # the environment beats the file
    assert resolved.server.route == "r1"  # the flag beats the file
    assert resolved.server.redis_url == "redis://redis:6379/2"


def test_an_unknown_durability_is_refused() -> None:
    with pytest.raises(ConfigError, match="durability must be one of off, async, sync"):
        resolve_serve_settings(build_parser().parse_args(["serve"]), {"OMNI_GRPC_DURABILITY": "x"})


def test_the_shipped_haproxy_template_names_every_replica() -> None:
    config = haproxy_config(
        (ROOT / "deploy/haproxy/haproxy.cfg.in").read_text(),
        ports=(50051, 8080, 8404),
        replicas=[("r1", 7001, 9001), ("r2", 7002, 9002)],
        bridges=[8081],
    )
    assert not re.search(r"@[A-Z_]+@", config)  # every placeholder filled in
    assert "bind 127.0.0.1:50051 proto h2" in config
    assert "use-server r2 if { req.hdr(x-omni-route) -m str r2 }" in config
    assert "server r1 127.0.0.1:7001 port 9001" in config
    assert "server b1 127.0.0.1:8081" in config


def _executable(folder: Path, name: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_programs_are_found_in_the_sbin_folders_whatever_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Debian puts haproxy in /usr/sbin, which an ordinary user's PATH leaves out: the cluster
    looks there too, and PATH still comes first."""
    sbin = _executable(tmp_path / "sbin", "haproxy").parent
    monkeypatch.setattr(cluster, "SBIN_DIRS", (str(sbin),))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert program("haproxy") == str(sbin / "haproxy")
    first = _executable(tmp_path / "bin", "haproxy")
    assert program("haproxy") == str(first)
    assert program("no-such-program") == "no-such-program"  # so starting it names it
    _executable(sbin, "redis-server")
    assert redis_command(6380, tmp_path)[0] == str(sbin / "redis-server")


def test_the_real_sbin_folders_hold_what_debian_installs_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # an ordinary user's
    assert Path(program("haproxy")).is_absolute()  # /usr/sbin/haproxy, from scripts/_env.sh
    assert Path(program("redis-server")).is_absolute()


def _exited(code: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    process.wait()
    return process


@pytest.mark.subprocess
def test_the_supervisor_restarts_as_its_policy_says_and_waits_longer_in_a_crash_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """scripts/cluster --restart: a replica killed or failed comes back (on-failure, always), a
    clean exit only with always; each start keeps the route and ports, and a replica that dies
    young waits twice as long before its next start. (The starts here run a process that exits
    at once: tests/cluster/test_restart.py restarts a real replica.)"""
    started: list[tuple[str, tuple[int, int, int]]] = []

    def spawn(_: cluster.Cluster, route: str, ports: tuple[int, int, int]) -> object:
        started.append((route, ports))
        return _exited(0)  # a start that ran and ended: seen dead at the next look

    monkeypatch.setattr(cluster, "_spawn_replica", spawn)
    local = cluster.Cluster(50051, 8080, 6379)
    killed = cluster.Replica("r1", 7001, 9001, _exited(137), 9101, started_at=0.0)
    clean = cluster.Replica("r2", 7002, 9002, _exited(0), 9102, started_at=0.0)
    local.replicas = [killed, clean]
    delay = cluster.RESTART_DELAY_S
    assert cluster.supervise(local, "no", 100.0) == []
    assert cluster.supervise(local, "on-failure", 100.0) == []  # seen dead: waits its delay
    assert cluster.supervise(local, "on-failure", 100.0 + delay) == [killed]
    assert started == [("r1", (7001, 9001, 9101))] and killed.restarts == 1
    # r1's new start died young (at once): its next start waits twice as long; r2 lived long.
    now = 100.0 + delay
    assert cluster.supervise(local, "always", now) == []
    assert (killed.delay_s, clean.delay_s) == (2 * delay, delay)
    assert cluster.supervise(local, "always", now + delay) == [clean]
    assert cluster.supervise(local, "always", now + 2 * delay - 0.01) == []
    assert killed in cluster.supervise(local, "always", now + 2 * delay)
    assert killed.restarts == 2 and [route for route, _ in started] == ["r1", "r2", "r1"]
