"""The recording policy in the configuration in force: off says nothing, all records every
session, on-request records those that ask, and an update asks again (or stops)."""

from __future__ import annotations

import pytest

from omni_grpc.core import Registry
from omni_grpc.core.config import RECORDING_POLICIES, resolve_recording
from omni_grpc.wire import pb

from .helpers import ENGINE, LIMITS, cmd, decode

ASK = pb.SessionConfig(recording=pb.SessionRecording(enabled=True))
QUIET = pb.SessionConfig(recording=pb.SessionRecording(enabled=False, omit_text=True))


def opened(policy: str, config: pb.SessionConfig) -> pb.SessionConfig:
    registry = Registry(LIMITS, ENGINE)
    registry.recording = policy
    session, effects = registry.open(pb.OpenSession(config=config), 0.0)
    [created] = decode(effects)
    assert created.session_created.session.config == session.config
    return session.config


@pytest.mark.parametrize(
    ("policy", "asked", "recorded"),
    [
        ("off", pb.SessionConfig(), None),
        ("off", ASK, None),
        ("all", pb.SessionConfig(), True),
        ("all", QUIET, True),
        ("on-request", pb.SessionConfig(), False),
        ("on-request", ASK, True),
        ("on-request", QUIET, False),
    ],
)
def test_the_configuration_in_force_says_whether_the_session_is_recorded(
    policy: str, asked: pb.SessionConfig, recorded: bool | None
) -> None:
    config = opened(policy, asked)
    if recorded is None:  # a server that records nothing: its sessions look as before
        assert not config.HasField("recording")
    else:
        assert config.recording.enabled is recorded


def test_what_a_session_leaves_out_stays_as_asked() -> None:
    config = opened("all", QUIET)
    assert config.recording.omit_text and not config.recording.omit_audio


@pytest.mark.parametrize(
    ("policy", "patch", "after"),
    [
        ("on-request", pb.SessionRecording(enabled=True), True),
        ("on-request", pb.SessionRecording(omit_audio=True), False),
        ("all", pb.SessionRecording(enabled=False), True),
        ("off", pb.SessionRecording(enabled=True), None),
    ],
)
def test_an_update_asks_for_recording_under_on_request_only(
    policy: str, patch: pb.SessionRecording, after: bool | None
) -> None:
    registry = Registry(LIMITS, ENGINE)
    registry.recording = policy
    session, _ = registry.open(pb.OpenSession(), 0.0)
    update = pb.UpdateSession(config=pb.SessionConfig(recording=patch))
    [updated] = decode(session.receive(1, cmd(1, update_session=update), 1.0))
    config = updated.session_updated.session.config
    if after is None:
        assert not config.HasField("recording")
    else:
        assert config.recording.enabled is after


def test_leaving_something_out_cannot_be_taken_back() -> None:
    registry = Registry(LIMITS, ENGINE)
    registry.recording = "all"
    session, _ = registry.open(pb.OpenSession(config=QUIET), 0.0)
    update = pb.UpdateSession(config=pb.SessionConfig(recording=pb.SessionRecording()))
    session.receive(1, cmd(1, update_session=update), 1.0)
    assert session.config.recording.omit_text


def test_every_policy_is_resolved() -> None:
    for policy in RECORDING_POLICIES:
        config = pb.SessionConfig()
        resolve_recording(config, policy)
        assert config.HasField("recording") is (policy != "off")
