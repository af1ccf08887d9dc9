"""What the core does with the contract fields vLLM-Omni's dialect needs: an append's hints are
held to the free-form bounds, and the handshake says the engine's model unit."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import struct_pb2

from omni_grpc.core import CommandError
from omni_grpc.core.limits import EngineFeatures, Limits, capabilities
from omni_grpc.core.validation import check_append
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import MAX_STRUCT_DEPTH

from .helpers import ENGINE, LIMITS

CONFIG = pb.SessionConfig(
    input_audio_format=pb.AudioFormat(encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=16000)
)


def hints(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


def test_an_append_with_hints_within_bounds_passes() -> None:
    given = hints({"is_speech": True, "vad": {"speech_probability": 0.9}, "transcript": "hi"})
    check_append(pb.AppendInputAudio(audio=b"\0\0", hints=given), b"\0\0", CONFIG, LIMITS, ENGINE)


def test_hints_nested_too_deep_are_refused_naming_hints() -> None:
    deep: dict[str, Any] = {"a": 1}
    for _ in range(MAX_STRUCT_DEPTH):
        deep = {"a": deep}
    with pytest.raises(CommandError) as refused:
        chunk = pb.AppendInputAudio(audio=b"\0\0", hints=hints(deep))
        check_append(chunk, chunk.audio, CONFIG, LIMITS, ENGINE)
    assert (refused.value.code, refused.value.param) == ("bad_event", "hints")


def test_the_handshake_gives_the_engines_model_unit() -> None:
    unit = EngineFeatures(name="units", chunk_period_ms=1000)
    assert capabilities(Limits(), unit).chunk_period_ms == 1000
    # An engine that takes input of any length says 0.
    assert capabilities(Limits(), ENGINE).chunk_period_ms == 0
    assert pb.Capabilities().chunk_period_ms == 0
