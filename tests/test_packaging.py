"""Packaging invariants: the version is declared once per place and the places agree."""

from __future__ import annotations

import tomllib
from pathlib import Path

import omni_grpc

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_version_matches_pyproject() -> None:
    declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"]
    assert omni_grpc.__version__ == declared


def test_console_script_points_at_cli() -> None:
    scripts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"omni-grpc": "omni_grpc.cli:main"}
