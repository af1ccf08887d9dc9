"""The rate-limit settings of ``omni-grpc serve``: flags, variables and the file, in that order."""

from __future__ import annotations

from pathlib import Path

from omni_cli import build_parser
from omni_cli.config import resolve_serve_settings
from omni_grpc.core import Limits


def test_rate_limits_default_generously_and_layer_file_then_env_then_flags(
    tmp_path: Path,
) -> None:
    defaults = resolve_serve_settings(build_parser().parse_args(["serve"]), {}).server.limits
    assert defaults == Limits()
    config = tmp_path / "serve.toml"
    config.write_text(
        "session_commands_per_s = 50\nrate_burst_s = 3\n[limits]\nkey_commands_per_s = 70\n"
    )
    args = build_parser().parse_args(
        ["serve", "--config", str(config), "--session-audio-bytes-per-s", "1000"]
    )
    env = {"OMNI_GRPC_RATE_BURST_S": "4", "OMNI_GRPC_KEY_AUDIO_BYTES_PER_S": "2000"}
    limits = resolve_serve_settings(args, env).server.limits
    assert (limits.session_commands_per_s, limits.key_commands_per_s) == (50.0, 70.0)
    assert (limits.session_audio_bytes_per_s, limits.key_audio_bytes_per_s) == (1000.0, 2000.0)
    assert limits.rate_burst_s == 4.0  # the variable over the file
    flagged = build_parser().parse_args(["serve", "--config", str(config), "--rate-burst-s", "5"])
    assert resolve_serve_settings(flagged, env).server.limits.rate_burst_s == 5.0
