"""The settings that open health checks and reflection to callers without a key, from every
source ``serve`` reads: the flags, the environment and the TOML file."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_cli import ConfigError, build_parser, resolve_serve_settings


def resolved(*flags: str, env: dict[str, str] | None = None) -> tuple[bool, bool]:
    args = build_parser().parse_args(["serve", *flags])
    server = resolve_serve_settings(args, env or {}).server
    return server.open_health, server.open_reflection


def test_health_is_open_and_reflection_closed_by_default() -> None:
    assert resolved() == (True, False)


def test_flags_beat_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    config = tmp_path / "omni.toml"
    config.write_text("open_health = false\nopen_reflection = true\n")
    from_file = {"OMNI_GRPC_CONFIG": str(config)}
    assert resolved(env=from_file) == (False, True)
    env = {**from_file, "OMNI_GRPC_OPEN_HEALTH": "on", "OMNI_GRPC_OPEN_REFLECTION": "no"}
    assert resolved(env=env) == (True, False)
    assert resolved("--no-open-health", "--open-reflection", env=env) == (False, True)


def test_a_switch_that_is_not_yes_or_no_is_refused() -> None:
    with pytest.raises(ConfigError, match="open_health must be true or false"):
        resolved(env={"OMNI_GRPC_OPEN_HEALTH": "maybe"})
