"""The settings of a replica behind a proxy: ``--route``, ``--durability``, ``--redis-url``."""

from __future__ import annotations

import re
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
