"""The memory budget of ``omni-grpc serve``: a flag, a variable or a file setting, and each
session's input cap kept to its share so that every session at its cap fits the budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_cli import build_parser
from omni_cli.config import MIB, ConfigError, resolve_serve_settings
from omni_grpc.core import Limits


def _limits(*flags: str, env: dict[str, str] | None = None) -> Limits:
    args = build_parser().parse_args(["serve", *flags])
    return resolve_serve_settings(args, env or {}).server.limits


def test_the_default_budget_holds_every_default_session_at_its_cap() -> None:
    limits = _limits()
    assert limits.memory_budget_bytes == 1024 * MIB
    assert limits.max_sessions * limits.max_pending_input_bytes == limits.memory_budget_bytes


def test_more_sessions_or_a_smaller_budget_shrink_each_session_share() -> None:
    assert _limits("--max-sessions", "128").max_pending_input_bytes == 8 * MIB
    small = _limits("--memory-budget-mib", "64")
    assert small.memory_budget_bytes == 64 * MIB
    assert small.max_pending_input_bytes == MIB
    from_env = _limits(env={"OMNI_GRPC_MEMORY_BUDGET_MIB": "256"})
    assert from_env.max_pending_input_bytes == 4 * MIB


def test_a_chosen_cap_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text("memory_budget_mib = 32\n[limits]\nmax_pending_input_bytes = 1048576\n")
    with pytest.raises(ConfigError, match="do not fit the memory budget"):
        _limits("--config", str(config))
    assert _limits("--config", str(config), "--max-sessions", "32").max_sessions == 32
    with pytest.raises(ConfigError, match="positive"):
        _limits("--memory-budget-mib", "0")
