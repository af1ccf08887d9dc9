"""The recording settings of ``serve``, from every source it reads: flags, the environment
and the TOML file (docs/operations.md, "Recorded sessions")."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_cli import ConfigError, build_parser, resolve_serve_settings
from omni_grpc.server.recording import RecordSettings
from omni_grpc.server.recording.settings import DAY_S


def recording(*flags: str, env: dict[str, str] | None = None) -> RecordSettings:
    args = build_parser().parse_args(["serve", *flags])
    return resolve_serve_settings(args, env or {}).server.recording


def test_recording_is_off_by_default() -> None:
    assert recording() == RecordSettings()
    assert RecordSettings().policy == "off"


def test_flags_beat_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    config = tmp_path / "omni.toml"
    config.write_text(
        'record = "on-request"\nrecord_dir = "/srv/rec"\nrecord_redact = ["text"]\n'
        "record_max_age_days = 7\nrecord_max_mib = 100\n"
    )
    from_file = recording(env={"OMNI_GRPC_CONFIG": str(config)})
    assert from_file == RecordSettings(
        policy="on-request",
        folder=Path("/srv/rec"),
        omit_text=True,
        max_age_s=7 * DAY_S,
        max_total_bytes=100 * 1024 * 1024,
    )
    env = {"OMNI_GRPC_CONFIG": str(config), "OMNI_GRPC_RECORD": "all"}
    env["OMNI_GRPC_RECORD_REDACT"] = "audio,text"
    from_env = recording(env=env)
    assert (from_env.policy, from_env.omit_audio, from_env.omit_text) == ("all", True, True)
    flags = recording(
        "--record", "off", "--record-redact", "audio", "--record-dir", "here", env=env
    )
    assert (flags.policy, flags.folder, flags.omit_audio, flags.omit_text) == (
        "off",
        Path("here"),
        True,
        False,
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--record-redact", "video"], "record_redact takes audio and text"),
        (["--record-max-age-days", "-1"], "must not be negative"),
    ],
)
def test_bad_recording_settings_are_refused(flags: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        recording(*flags)


def test_an_unknown_policy_is_refused_by_the_parser() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--record", "sometimes"])
