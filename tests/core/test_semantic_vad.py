"""Semantic VAD, which OpenAI's agents SDKs ask for by default, resolves to what the engine has."""

from __future__ import annotations

import pytest

from omni_grpc.core import EngineFeatures, Limits
from omni_grpc.core.config import merge_config, resolve_config
from omni_grpc.wire import pb

from .helpers import ENGINE, VAD_ENGINE

LIMITS = Limits()
SEMANTIC = pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SEMANTIC_VAD, silence_duration_ms=900)


@pytest.mark.parametrize(
    ("engine", "resolved"),
    [(VAD_ENGINE, pb.TURN_DETECTION_TYPE_SERVER_VAD), (ENGINE, pb.TURN_DETECTION_TYPE_NONE)],
)
def test_semantic_vad_opens_as_the_engines_detector_or_client_commits(
    engine: EngineFeatures, resolved: pb.TurnDetectionType.ValueType
) -> None:
    config = resolve_config(pb.SessionConfig(turn_detection=SEMANTIC), LIMITS, engine)
    assert config.turn_detection.type == resolved
    assert config.turn_detection.silence_duration_ms == 900  # what the client's eagerness chose


@pytest.mark.parametrize(
    ("engine", "resolved"),
    [(VAD_ENGINE, pb.TURN_DETECTION_TYPE_SERVER_VAD), (ENGINE, pb.TURN_DETECTION_TYPE_NONE)],
)
def test_an_update_with_semantic_vad_keeps_the_rest_of_the_update(
    engine: EngineFeatures, resolved: pb.TurnDetectionType.ValueType
) -> None:
    current = resolve_config(
        pb.SessionConfig(turn_detection=pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_NONE)),
        LIMITS,
        engine,
    )
    patch = pb.SessionConfig(instructions="Answer briefly.", turn_detection=SEMANTIC)
    merged = merge_config(current, patch, LIMITS, engine)
    assert merged.turn_detection.type == resolved
    assert merged.instructions == "Answer briefly."
