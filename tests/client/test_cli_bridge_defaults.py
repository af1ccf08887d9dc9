"""The bridge's defaults live in ``bridge.options.BridgeOptions`` alone: the CLI reads them."""

from __future__ import annotations

import dataclasses

from bridge.options import BridgeOptions
from omni_cli import build_parser, resolve_bridge_settings, resolve_serve_settings


def test_bridge_with_no_flags_runs_on_the_options_own_defaults() -> None:
    args = build_parser().parse_args(["bridge", "--grpc-target", "127.0.0.1:50051"])
    settings = resolve_bridge_settings(args, {})
    # A bridge alone shares a few ConverseMany calls by default (--no-multiplex turns it off).
    assert settings.bridge == dataclasses.replace(BridgeOptions(), multiplex=True)


def test_serve_s_bridge_takes_the_options_own_defaults_too() -> None:
    settings = resolve_serve_settings(build_parser().parse_args(["serve"]), {})
    assert settings.bridge == BridgeOptions()
    assert settings.http_port == BridgeOptions().port
