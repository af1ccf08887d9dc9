"""Transcription sessions and transcription settings: the core's rules (core/transcription.py)."""

from __future__ import annotations

from typing import Any

import pytest

from omni_grpc.core import EngineFeatures
from omni_grpc.core.config import merge_config, resolve_config
from omni_grpc.core.errors import CommandError
from omni_grpc.core.limits import capabilities
from omni_grpc.wire import pb
from tests.core.helpers import LIMITS, cmd, decode, kinds, open_session, requests, transcript

ASR = EngineFeatures(
    name="asr-engine",
    default_model="m",
    supports_server_vad=True,
    transcription_models=("base", "tiny.en"),
)
WITH_LOGPROBS = EngineFeatures(
    name="logprobs-engine", transcription_models=("w",), supports_transcription_logprobs=True
)
TRANSCRIPTION = pb.SESSION_TYPE_TRANSCRIPTION


def transcription_config(**fields: Any) -> pb.SessionConfig:
    return pb.SessionConfig(
        type=TRANSCRIPTION, input_transcription=pb.InputTranscriptionConfig(**fields)
    )


def refusal(config: pb.SessionConfig, engine: EngineFeatures = ASR) -> CommandError:
    with pytest.raises(CommandError) as refused:
        resolve_config(config, LIMITS, engine)
    return refused.value


def test_capabilities_list_the_models_and_whether_there_are_logprobs() -> None:
    caps = capabilities(LIMITS, ASR)
    assert (list(caps.transcription_models), caps.supports_transcription_logprobs) == (
        ["base", "tiny.en"],
        False,
    )
    assert capabilities(LIMITS, WITH_LOGPROBS).supports_transcription_logprobs


def test_a_session_is_realtime_and_transcribes_with_the_default_model_unless_told() -> None:
    config = resolve_config(pb.SessionConfig(), LIMITS, ASR)
    assert config.type == pb.SESSION_TYPE_REALTIME
    assert config.input_transcription == pb.InputTranscriptionConfig(enabled=True, model="base")


def test_a_transcription_session_always_transcribes_and_never_creates_responses() -> None:
    config = resolve_config(
        transcription_config(enabled=False, model="tiny.en", language="fr", prompt="Names: Zoë"),
        LIMITS,
        ASR,
    )
    assert config.input_transcription == pb.InputTranscriptionConfig(
        enabled=True, model="tiny.en", language="fr", prompt="Names: Zoë"
    )
    td = config.turn_detection
    assert (td.type, td.create_response, td.interrupt_response) == (
        pb.TURN_DETECTION_TYPE_SERVER_VAD,
        False,
        False,
    )


@pytest.mark.parametrize(
    ("config", "engine", "code", "param"),
    [
        (
            transcription_config(model="whisper-9"),
            ASR,
            "unknown_transcription_model",
            "input_transcription.model",
        ),
        (
            pb.SessionConfig(input_transcription=pb.InputTranscriptionConfig(model="x")),
            EngineFeatures(name="no-asr"),
            "unknown_transcription_model",
            "input_transcription.model",
        ),
        (
            transcription_config(language="English"),
            ASR,
            "invalid_session_config",
            "input_transcription.language",
        ),
        (
            transcription_config(prompt="x" * 4097),
            ASR,
            "invalid_session_config",
            "input_transcription.prompt",
        ),
        (
            pb.SessionConfig(transcription_logprobs=True),
            ASR,
            "unsupported_transcription_logprobs",
            "transcription_logprobs",
        ),
        (
            pb.SessionConfig(
                type=TRANSCRIPTION,
                turn_detection=pb.TurnDetection(
                    type=pb.TURN_DETECTION_TYPE_SERVER_VAD, idle_timeout_ms=5000
                ),
            ),
            ASR,
            "responses_unsupported",
            "turn_detection.idle_timeout_ms",
        ),
        (pb.SessionConfig(type=7), ASR, "invalid_session_config", "type"),  # type: ignore[arg-type]
    ],
    ids=["unknown-model", "no-models", "language", "prompt", "logprobs", "idle", "type"],
)
def test_bad_transcription_settings_are_refused_naming_the_param(
    config: pb.SessionConfig, engine: EngineFeatures, code: str, param: str
) -> None:
    error = refusal(config, engine)
    assert (error.code, error.param) == (code, param)


def test_logprobs_are_taken_where_the_engine_has_them() -> None:
    asked = pb.SessionConfig(type=TRANSCRIPTION, transcription_logprobs=True)
    config = resolve_config(asked, LIMITS, WITH_LOGPROBS)
    assert config.transcription_logprobs and config.input_transcription.model == "w"


def test_an_update_replaces_the_transcription_settings_whole_and_keeps_the_type() -> None:
    current = resolve_config(pb.SessionConfig(), LIMITS, ASR)
    off = pb.SessionConfig(input_transcription=pb.InputTranscriptionConfig(enabled=False))
    merged = merge_config(current, off, LIMITS, ASR)
    # Off, and the default model still named: the settings were replaced, then resolved.
    assert merged.input_transcription == pb.InputTranscriptionConfig(enabled=False, model="base")
    untouched = merge_config(merged, pb.SessionConfig(instructions="hi"), LIMITS, ASR)
    assert not untouched.input_transcription.enabled


def test_an_update_may_change_the_type_and_back() -> None:
    current = resolve_config(pb.SessionConfig(), LIMITS, ASR)
    transcribing = merge_config(current, pb.SessionConfig(type=TRANSCRIPTION), LIMITS, ASR)
    td = transcribing.turn_detection
    assert (transcribing.type, td.create_response, td.interrupt_response) == (
        TRANSCRIPTION,
        False,
        False,
    )
    kept = merge_config(transcribing, pb.SessionConfig(instructions="x"), LIMITS, ASR)
    assert (kept.type, kept.turn_detection.create_response) == (TRANSCRIPTION, False)
    back = merge_config(transcribing, pb.SessionConfig(type=pb.SESSION_TYPE_REALTIME), LIMITS, ASR)
    td = back.turn_detection
    assert (back.type, td.create_response, td.interrupt_response) == (
        pb.SESSION_TYPE_REALTIME,
        True,
        True,
    )
    quiet = pb.TurnDetection(create_response=False)
    back = merge_config(
        transcribing,
        pb.SessionConfig(type=pb.SESSION_TYPE_REALTIME, turn_detection=quiet),
        LIMITS,
        ASR,
    )
    assert (back.turn_detection.create_response, back.turn_detection.interrupt_response) == (
        False,
        True,
    )


def test_a_transcription_session_refuses_responses_and_keeps_its_other_commands() -> None:
    opened = open_session(engine=ASR, config=transcription_config())
    session = opened.session
    asked = session.receive(1, cmd(1, "e1", create_response=pb.CreateResponse()), 1.0)
    [event] = decode(asked)
    assert (event.error.code, event.error.event_id, event.error.client_seq) == (
        "responses_unsupported",
        "e1",
        1,
    )
    assert not asked.engine
    commit = pb.CommitInputAudio(create_response=True)
    [event] = decode(session.receive(1, cmd(2, commit_input_audio=commit), 1.0))
    assert (event.error.code, event.error.param) == ("responses_unsupported", "create_response")
    # A plain commit (the buffer is the engine's under server VAD) and a clear go on.
    handed = session.receive(1, cmd(3, commit_input_audio=pb.CommitInputAudio()), 1.0)
    assert [kind for kind, _ in requests(handed)] == ["commit_input_audio"]
    assert session.state.name == "ATTACHED"


def test_a_realtime_session_still_takes_responses() -> None:
    opened = open_session(engine=ASR)
    effects = opened.session.receive(1, cmd(1, create_response=pb.CreateResponse()), 1.0)
    assert [kind for kind, _ in requests(effects)] == ["create_response"]


def test_transcripts_turned_off_are_dropped_whatever_the_engine_sends() -> None:
    opened = open_session(engine=ASR)
    session = opened.session
    assert kinds(decode(session.publish(transcript("a"), 1.0))) == ["input_transcription"]
    off = pb.SessionConfig(input_transcription=pb.InputTranscriptionConfig(enabled=False))
    updated = session.receive(1, cmd(1, update_session=pb.UpdateSession(config=off)), 1.0)
    [event] = decode(updated)
    assert not event.session_updated.session.config.input_transcription.enabled
    delta = pb.ConverseResponse(
        input_transcription_delta=pb.InputTranscriptionDelta(item_id="i", delta="he")
    )
    failed = pb.ConverseResponse(
        input_transcription_failed=pb.InputTranscriptionFailed(item_id="i")
    )
    for event in (transcript("b"), delta, failed):
        assert not decode(session.publish(event, 2.0))
    on = pb.SessionConfig(input_transcription=pb.InputTranscriptionConfig(enabled=True))
    session.receive(1, cmd(2, update_session=pb.UpdateSession(config=on)), 3.0)
    assert kinds(decode(session.publish(transcript("c"), 4.0))) == ["input_transcription"]
