"""Turn-taking settings: semantic turn detection, the idle timeout and the interruption rules,
resolved against what the engine can do."""

from __future__ import annotations

import dataclasses

import pytest

from omni_grpc.core import CommandError, EngineFeatures, Limits
from omni_grpc.core.config import merge_config, resolve_config
from omni_grpc.core.limits import capabilities
from omni_grpc.wire import pb

from .helpers import ENGINE, VAD_ENGINE

LIMITS = Limits()
SEMANTIC_ENGINE = dataclasses.replace(
    VAD_ENGINE,
    name="semantic-engine",
    supports_semantic_vad=True,
    supports_interruption_by_words=True,
)
SEMANTIC, VAD, NONE = (
    pb.TURN_DETECTION_TYPE_SEMANTIC_VAD,
    pb.TURN_DETECTION_TYPE_SERVER_VAD,
    pb.TURN_DETECTION_TYPE_NONE,
)


def resolved(engine: EngineFeatures, **fields: object) -> pb.SessionConfig:
    return resolve_config(pb.SessionConfig(**fields), LIMITS, engine)  # type: ignore[arg-type]


def refusal(engine: EngineFeatures, **fields: object) -> CommandError:
    with pytest.raises(CommandError) as refused:
        resolved(engine, **fields)
    return refused.value


@pytest.mark.parametrize(
    ("engine", "kind", "silence_ms"),
    [(SEMANTIC_ENGINE, SEMANTIC, 500), (VAD_ENGINE, VAD, 300), (ENGINE, NONE, 300)],
    ids=["judges-words", "vad-only", "no-vad"],
)
def test_semantic_vad_is_served_where_words_are_judged_and_stood_in_for_elsewhere(
    engine: EngineFeatures, kind: pb.TurnDetectionType.ValueType, silence_ms: int
) -> None:
    asked = pb.TurnDetection(type=SEMANTIC, eagerness=pb.EAGERNESS_HIGH)
    td = resolved(engine, turn_detection=asked).turn_detection
    assert td.type == kind
    # The eagerness means something only to semantic detection; elsewhere its silence stands in.
    assert td.eagerness == (pb.EAGERNESS_HIGH if kind == SEMANTIC else pb.EAGERNESS_UNSPECIFIED)
    assert td.silence_duration_ms == silence_ms


def test_semantic_vad_without_an_eagerness_is_the_stand_in_everywhere() -> None:
    # What the type meant before eagerness existed: the engine's detector, the client's silence.
    asked = pb.TurnDetection(type=SEMANTIC, silence_duration_ms=900)
    td = resolved(SEMANTIC_ENGINE, turn_detection=asked).turn_detection
    assert (td.type, td.silence_duration_ms, td.eagerness) == (VAD, 900, pb.EAGERNESS_UNSPECIFIED)


def test_an_update_keeps_semantic_vad_and_a_new_type_drops_the_eagerness() -> None:
    asked = pb.TurnDetection(type=SEMANTIC, eagerness=pb.EAGERNESS_LOW)
    current = resolved(SEMANTIC_ENGINE, turn_detection=asked)
    assert current.overlap_policy == pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH  # it hears speech
    patch = pb.SessionConfig(turn_detection=pb.TurnDetection(threshold=0.8))
    kept = merge_config(current, patch, LIMITS, SEMANTIC_ENGINE).turn_detection
    assert (kept.type, kept.eagerness, kept.threshold) == (SEMANTIC, pb.EAGERNESS_LOW, 0.8)
    patch = pb.SessionConfig(turn_detection=pb.TurnDetection(type=VAD))
    plain = merge_config(current, patch, LIMITS, SEMANTIC_ENGINE).turn_detection
    assert (plain.type, plain.eagerness) == (VAD, pb.EAGERNESS_UNSPECIFIED)


def test_an_unknown_eagerness_is_refused() -> None:
    asked = pb.TurnDetection(type=SEMANTIC, eagerness=99)  # type: ignore[arg-type]
    error = refusal(SEMANTIC_ENGINE, turn_detection=asked)
    assert (error.code, error.param) == ("invalid_session_config", "turn_detection.eagerness")


def test_the_idle_timeout_is_off_until_asked_and_can_be_turned_off_again() -> None:
    assert not resolved(VAD_ENGINE).turn_detection.idle_timeout_ms
    current = resolved(VAD_ENGINE, turn_detection=pb.TurnDetection(idle_timeout_ms=6000))
    assert current.turn_detection.idle_timeout_ms == 6000
    patch = pb.SessionConfig(turn_detection=pb.TurnDetection(threshold=0.6))
    assert merge_config(current, patch, LIMITS, VAD_ENGINE).turn_detection.idle_timeout_ms == 6000
    patch = pb.SessionConfig(turn_detection=pb.TurnDetection(idle_timeout_ms=0))
    assert merge_config(current, patch, LIMITS, VAD_ENGINE).turn_detection.idle_timeout_ms == 0


@pytest.mark.parametrize(
    ("engine", "asked", "code"),
    [
        (ENGINE, pb.TurnDetection(idle_timeout_ms=5000), "unsupported_turn_detection"),
        (
            VAD_ENGINE,
            pb.TurnDetection(type=NONE, idle_timeout_ms=5000),
            "unsupported_turn_detection",
        ),
        (VAD_ENGINE, pb.TurnDetection(idle_timeout_ms=3_600_001), "invalid_session_config"),
    ],
    ids=["no-vad", "client-commits", "too-long"],
)
def test_an_idle_timeout_without_a_detector_or_too_long_is_refused(
    engine: EngineFeatures, asked: pb.TurnDetection, code: str
) -> None:
    error = refusal(engine, turn_detection=asked)
    assert (error.code, error.param) == (code, "turn_detection.idle_timeout_ms")


def test_interruptions_default_to_openais_behaviour_on_every_engine() -> None:
    for engine in (ENGINE, VAD_ENGINE, SEMANTIC_ENGINE):
        rules = resolved(engine).interruption
        assert (rules.mode, rules.min_duration_ms, rules.resume_false_interruption) == (
            pb.INTERRUPTION_MODE_SPEECH,
            0,
            False,
        )
        assert (rules.min_words, rules.false_interruption_timeout_ms) == (1, 2000)


def test_interruption_settings_merge_field_by_field() -> None:
    asked = pb.InterruptionConfig(
        mode=pb.INTERRUPTION_MODE_WORDS, min_words=2, resume_false_interruption=True
    )
    current = resolved(SEMANTIC_ENGINE, interruption=asked)
    patch = pb.SessionConfig(interruption=pb.InterruptionConfig(min_duration_ms=300))
    merged = merge_config(current, patch, LIMITS, SEMANTIC_ENGINE).interruption
    assert (merged.mode, merged.min_words, merged.min_duration_ms) == (
        pb.INTERRUPTION_MODE_WORDS,
        2,
        300,
    )
    assert merged.resume_false_interruption
    patch = pb.SessionConfig(interruption=pb.InterruptionConfig(min_duration_ms=0))
    assert merge_config(current, patch, LIMITS, SEMANTIC_ENGINE).interruption.min_duration_ms == 0


@pytest.mark.parametrize(
    ("engine", "asked", "code", "param"),
    [
        (
            VAD_ENGINE,
            pb.InterruptionConfig(mode=pb.INTERRUPTION_MODE_WORDS),
            "unsupported_interruption",
            "interruption.mode",
        ),
        (
            ENGINE,
            pb.InterruptionConfig(resume_false_interruption=True),
            "unsupported_interruption",
            "interruption",
        ),
        (
            ENGINE,
            pb.InterruptionConfig(min_duration_ms=400),
            "unsupported_interruption",
            "interruption",
        ),
        (
            SEMANTIC_ENGINE,
            pb.InterruptionConfig(mode=pb.INTERRUPTION_MODE_WORDS, min_words=0),
            "invalid_session_config",
            "interruption.min_words",
        ),
        (
            SEMANTIC_ENGINE,
            pb.InterruptionConfig(min_duration_ms=10_001),
            "invalid_session_config",
            "interruption.min_duration_ms",
        ),
        (
            SEMANTIC_ENGINE,
            pb.InterruptionConfig(false_interruption_timeout_ms=10_001),
            "invalid_session_config",
            "interruption.false_interruption_timeout_ms",
        ),
    ],
    ids=["words-unheard", "resume-no-vad", "duration-no-vad", "no-words", "long", "timeout"],
)
def test_interruptions_an_engine_cannot_honour_are_refused_typed(
    engine: EngineFeatures, asked: pb.InterruptionConfig, code: str, param: str
) -> None:
    error = refusal(engine, interruption=asked)
    assert (error.code, error.param) == (code, param)


def test_the_handshake_says_what_the_engine_judges() -> None:
    caps = capabilities(LIMITS, SEMANTIC_ENGINE)
    assert caps.supports_semantic_vad and caps.supports_interruption_by_words
    plain = capabilities(LIMITS, VAD_ENGINE)
    assert not plain.supports_semantic_vad and not plain.supports_interruption_by_words
