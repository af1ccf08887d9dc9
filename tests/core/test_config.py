"""Session configuration: the defaults, what is refused, and how an update merges."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from omni_grpc.core import CommandError, EngineFeatures, Limits
from omni_grpc.core.config import merge_config, resolve_config
from omni_grpc.wire import pb

from .helpers import ENGINE, VAD_ENGINE, cmd, decode, handed, open_session, requests

LIMITS = Limits()
PCM16, F32 = pb.AUDIO_ENCODING_PCM16, pb.AUDIO_ENCODING_PCM_F32
ULAW, ALAW = pb.AUDIO_ENCODING_G711_ULAW, pb.AUDIO_ENCODING_G711_ALAW
NONE, VAD = pb.TURN_DETECTION_TYPE_NONE, pb.TURN_DETECTION_TYPE_SERVER_VAD


def seconds(value: float) -> Any:
    config = pb.SessionConfig()
    config.idle_timeout.FromMilliseconds(int(value * 1000))
    return config.idle_timeout


def defaults(
    turn_type: pb.TurnDetectionType.ValueType, overlap: pb.OverlapPolicy.ValueType
) -> pb.SessionConfig:
    return pb.SessionConfig(
        model="test-model",
        output_modalities=[pb.MODALITY_AUDIO],
        input_audio_format=pb.AudioFormat(encoding=PCM16, sample_rate_hz=24000),
        output_audio_format=pb.AudioFormat(encoding=PCM16, sample_rate_hz=24000),
        turn_detection=pb.TurnDetection(
            type=turn_type,
            threshold=0.5,
            prefix_padding_ms=300,
            silence_duration_ms=500,
            create_response=True,
            interrupt_response=True,
        ),
        overlap_policy=overlap,
        playback_commit_policy=pb.PLAYBACK_COMMIT_POLICY_COMMIT_ALL_ON_DONE,
        idle_timeout=seconds(LIMITS.idle_timeout_s),
        tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_AUTO),
        # OpenAI's behaviour: any speech over a reply ends it, at once.
        interruption=pb.InterruptionConfig(
            mode=pb.INTERRUPTION_MODE_SPEECH,
            min_duration_ms=0,
            min_words=1,
            resume_false_interruption=False,
            false_interruption_timeout_ms=2000,
        ),
        # OpenAI's default: a response may call several functions.
        parallel_tool_calls=True,
        type=pb.SESSION_TYPE_REALTIME,
        # Transcripts on, as every engine made them before they could be turned off.
        input_transcription=pb.InputTranscriptionConfig(enabled=True),
        transcription_logprobs=False,
        # OpenAI's default: the oldest items give way to what fits.
        truncation=pb.Truncation(type=pb.TRUNCATION_TYPE_AUTO),
        # OpenAI's default: no noise reduction.
        noise_reduction=pb.NoiseReduction(type=pb.NOISE_REDUCTION_TYPE_OFF),
    )


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        (ENGINE, defaults(NONE, pb.OVERLAP_POLICY_LISTEN_ONLY)),
        (VAD_ENGINE, defaults(VAD, pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH)),
        (
            EngineFeatures(
                name="vad-no-barge",
                default_model="test-model",
                supports_server_vad=True,
                supports_barge_in=False,
            ),
            defaults(VAD, pb.OVERLAP_POLICY_LISTEN_ONLY),
        ),
    ],
    ids=["plain", "vad", "vad-without-barge-in"],
)
def test_an_empty_config_gets_complete_defaults(
    engine: EngineFeatures, expected: pb.SessionConfig
) -> None:
    assert resolve_config(pb.SessionConfig(), LIMITS, engine) == expected


@pytest.mark.parametrize("encoding", [ULAW, ALAW])
def test_g711_defaults_to_8_khz(encoding: pb.AudioEncoding.ValueType) -> None:
    fmt = pb.AudioFormat(encoding=encoding)
    config = resolve_config(
        pb.SessionConfig(input_audio_format=fmt, output_audio_format=fmt), LIMITS, ENGINE
    )
    assert config.input_audio_format == pb.AudioFormat(encoding=encoding, sample_rate_hz=8000)
    assert config.output_audio_format == pb.AudioFormat(encoding=encoding, sample_rate_hz=8000)


def test_resolving_leaves_the_request_untouched() -> None:
    requested = pb.SessionConfig(instructions="be brief")
    resolve_config(requested, LIMITS, ENGINE)
    assert requested == pb.SessionConfig(instructions="be brief")


PCM16_ONLY = EngineFeatures(name="pcm16-only", input_encodings=(PCM16,))
NO_BARGE_IN = EngineFeatures(name="no-barge-in", supports_barge_in=False)
NEAR, FAR = pb.NOISE_REDUCTION_TYPE_NEAR_FIELD, pb.NOISE_REDUCTION_TYPE_FAR_FIELD
DENOISING = EngineFeatures(name="denoising", noise_reduction_types=(NEAR, FAR))

INVALID: list[tuple[pb.SessionConfig, EngineFeatures, str, str]] = [
    (
        pb.SessionConfig(output_modalities=[pb.MODALITY_UNSPECIFIED]),
        ENGINE,
        "invalid_session_config",
        "output_modalities",
    ),
    (
        pb.SessionConfig(instructions="x" * (LIMITS.max_text_chars + 1)),
        ENGINE,
        "invalid_session_config",
        "instructions",
    ),
    (
        pb.SessionConfig(input_audio_format=pb.AudioFormat(encoding=ULAW)),
        PCM16_ONLY,
        "unsupported_audio_format",
        "input_audio_format.encoding",
    ),
    (
        pb.SessionConfig(input_audio_format=pb.AudioFormat(sample_rate_hz=11025)),
        ENGINE,
        "unsupported_audio_format",
        "input_audio_format.sample_rate_hz",
    ),
    (
        pb.SessionConfig(
            output_audio_format=pb.AudioFormat(encoding=pb.AudioEncoding.ValueType(99))
        ),
        ENGINE,
        "unsupported_audio_format",
        "output_audio_format.encoding",
    ),
    (
        pb.SessionConfig(output_audio_format=pb.AudioFormat(sample_rate_hz=11025)),
        ENGINE,
        "unsupported_audio_format",
        "output_audio_format.sample_rate_hz",
    ),
    (
        pb.SessionConfig(turn_detection=pb.TurnDetection(type=VAD)),
        ENGINE,
        "unsupported_turn_detection",
        "turn_detection",
    ),
    *[
        (
            pb.SessionConfig(turn_detection=pb.TurnDetection(threshold=t)),
            ENGINE,
            "unsupported_turn_detection",
            "turn_detection.threshold",
        )
        for t in (0.15, -0.5, 1.01)
    ],
    (
        pb.SessionConfig(overlap_policy=pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH),
        NO_BARGE_IN,
        "barge_in_unsupported",
        "overlap_policy",
    ),
    (
        pb.SessionConfig(idle_timeout=seconds(LIMITS.max_idle_timeout_s + 1)),
        ENGINE,
        "invalid_session_config",
        "idle_timeout",
    ),
    *[
        (
            pb.SessionConfig(noise_reduction=pb.NoiseReduction(type=kind)),
            ENGINE,  # lists no noise reduction types
            "unsupported_noise_reduction",
            "noise_reduction.type",
        )
        for kind in (pb.NOISE_REDUCTION_TYPE_NEAR_FIELD, pb.NOISE_REDUCTION_TYPE_FAR_FIELD)
    ],
    (
        pb.SessionConfig(noise_reduction=pb.NoiseReduction(type=9)),  # type: ignore[arg-type]
        DENOISING,
        "invalid_session_config",
        "noise_reduction.type",
    ),
    (pb.SessionConfig(idle_timeout=seconds(-1)), ENGINE, "invalid_session_config", "idle_timeout"),
    *[
        (pb.SessionConfig(temperature=t), ENGINE, "invalid_session_config", "temperature")
        for t in (-0.01, 2.01)
    ],
]


@pytest.mark.parametrize(("config", "engine", "code", "param"), INVALID)
def test_invalid_configs_are_refused_with_a_code_and_param(
    config: pb.SessionConfig, engine: EngineFeatures, code: str, param: str
) -> None:
    with pytest.raises(CommandError) as refused:
        resolve_config(config, LIMITS, engine)
    assert (refused.value.code, refused.value.param) == (code, param)


@pytest.mark.parametrize(
    ("config", "check"),
    [
        (
            pb.SessionConfig(turn_detection=pb.TurnDetection(threshold=1.0)),
            lambda c: c.turn_detection.threshold == 1.0,
        ),
        (
            pb.SessionConfig(turn_detection=pb.TurnDetection(threshold=0.151)),
            lambda c: c.turn_detection.threshold == 0.151,
        ),
        (
            pb.SessionConfig(idle_timeout=seconds(LIMITS.max_idle_timeout_s)),
            lambda c: c.idle_timeout.ToSeconds() == LIMITS.max_idle_timeout_s,
        ),
        (pb.SessionConfig(temperature=0.0), lambda c: c.HasField("temperature")),
        (pb.SessionConfig(temperature=2.0), lambda c: c.temperature == 2.0),
        (
            pb.SessionConfig(output_modalities=[pb.MODALITY_TEXT, pb.MODALITY_AUDIO]),
            lambda c: list(c.output_modalities) == [pb.MODALITY_TEXT, pb.MODALITY_AUDIO],
        ),
        (
            pb.SessionConfig(instructions="x" * LIMITS.max_text_chars),
            lambda c: len(c.instructions) == LIMITS.max_text_chars,
        ),
    ],
    ids=[
        "threshold-1",
        "threshold-above-0.15",
        "max-idle",
        "temp-0",
        "temp-2",
        "modalities",
        "max-instructions",
    ],
)
def test_boundary_values_are_accepted(
    config: pb.SessionConfig, check: Callable[[pb.SessionConfig], bool]
) -> None:
    assert check(resolve_config(config, LIMITS, ENGINE))


# -- update -----------------------------------------------------------------------------


def current() -> pb.SessionConfig:
    return resolve_config(
        pb.SessionConfig(
            instructions="be brief",
            voice="alloy",
            temperature=0.7,
            turn_detection=pb.TurnDetection(
                type=NONE, threshold=0.7, silence_duration_ms=900, create_response=False
            ),
            input_audio_format=pb.AudioFormat(encoding=F32, sample_rate_hz=48000),
        ),
        LIMITS,
        VAD_ENGINE,
    )


def test_update_keeps_every_field_it_does_not_set() -> None:
    merged = merge_config(current(), pb.SessionConfig(voice="verse"), LIMITS, VAD_ENGINE)
    expected = current()
    expected.voice = "verse"
    assert merged == expected


def test_update_merges_nested_messages_field_by_field() -> None:
    patch = pb.SessionConfig(turn_detection=pb.TurnDetection(prefix_padding_ms=100))
    merged = merge_config(current(), patch, LIMITS, VAD_ENGINE)
    assert merged.turn_detection == pb.TurnDetection(
        type=NONE,
        threshold=0.7,
        prefix_padding_ms=100,
        silence_duration_ms=900,
        create_response=False,
        interrupt_response=True,
    )
    assert (merged.instructions, merged.temperature) == ("be brief", 0.7)


def test_update_replaces_lists_durations_and_structs_whole() -> None:
    base = current()
    base.idle_timeout.FromMilliseconds(300_500)
    base.engine_options.update({"a": 1, "b": 2})
    patch = pb.SessionConfig(output_modalities=[pb.MODALITY_TEXT])
    patch.idle_timeout.FromSeconds(10)
    patch.engine_options.update({"c": 3})
    merged = merge_config(base, patch, LIMITS, VAD_ENGINE)
    assert list(merged.output_modalities) == [pb.MODALITY_TEXT]
    assert merged.idle_timeout.ToMilliseconds() == 10_000  # not 10 s plus the old 0.5 s
    assert dict(merged.engine_options) == {"c": 3}


@pytest.mark.parametrize(
    ("patch", "field", "kept"),
    [
        (
            pb.SessionConfig(turn_detection=pb.TurnDetection(threshold=0.8)),
            "turn_detection.type",
            NONE,
        ),
        (
            pb.SessionConfig(input_audio_format=pb.AudioFormat(sample_rate_hz=16000)),
            "input_audio_format.encoding",
            F32,
        ),
    ],
    ids=["turn-detection-type", "input-encoding"],
)
def test_update_keeps_an_unspecified_enum(patch: pb.SessionConfig, field: str, kept: int) -> None:
    # The contract (duplex.proto, SessionConfig and TurnDetectionType): "_UNSPECIFIED enums
    # leave the current value as it is" / "unchanged on update".
    merged = merge_config(current(), patch, LIMITS, VAD_ENGINE)
    message_name, enum_name = field.split(".")
    assert getattr(getattr(merged, message_name), enum_name) == kept


def test_noise_reduction_is_off_by_default_kept_on_update_and_turned_off_by_off() -> None:
    opened = resolve_config(pb.SessionConfig(), LIMITS, DENOISING)
    assert opened.noise_reduction.type == pb.NOISE_REDUCTION_TYPE_OFF
    on = pb.SessionConfig(noise_reduction=pb.NoiseReduction(type=FAR))
    far = merge_config(opened, on, LIMITS, DENOISING)
    assert far.noise_reduction.type == FAR
    kept = merge_config(far, pb.SessionConfig(temperature=0.5), LIMITS, DENOISING)
    assert kept.noise_reduction.type == FAR
    off = pb.SessionConfig(noise_reduction=pb.NoiseReduction(type=pb.NOISE_REDUCTION_TYPE_OFF))
    assert merge_config(far, off, LIMITS, DENOISING).noise_reduction.type == (
        pb.NOISE_REDUCTION_TYPE_OFF
    )
    # OFF is taken by every engine, those that reduce no noise too.
    assert merge_config(current(), off, LIMITS, VAD_ENGINE).noise_reduction.type == (
        pb.NOISE_REDUCTION_TYPE_OFF
    )


def test_update_cannot_change_the_model_but_may_repeat_it() -> None:
    with pytest.raises(CommandError) as refused:
        merge_config(current(), pb.SessionConfig(model="other"), LIMITS, VAD_ENGINE)
    assert (refused.value.code, refused.value.param) == ("model_update_unsupported", "model")
    same = merge_config(current(), pb.SessionConfig(model="test-model"), LIMITS, VAD_ENGINE)
    assert same == current()


def test_the_merged_result_is_validated_again() -> None:
    with pytest.raises(CommandError, match="temperature"):
        merge_config(current(), pb.SessionConfig(temperature=9.0), LIMITS, VAD_ENGINE)


def test_session_update_announces_and_forwards_the_complete_config() -> None:
    s = open_session().session
    update = cmd(
        1,
        "ev-u",
        update_session=pb.UpdateSession(config=pb.SessionConfig(instructions="speak slowly")),
    )
    effects = s.receive(1, update, now=0.0)
    assert s.config.instructions == "speak slowly"
    assert decode(effects) == [
        pb.ConverseResponse(
            seq=1, applied_client_seq=1, session_updated=pb.SessionUpdated(session=s.view())
        )
    ]
    assert requests(effects) == [
        handed(cmd(1, "ev-u", update_session=pb.UpdateSession(config=s.config)))
    ]


def test_a_refused_update_changes_nothing() -> None:
    s = open_session().session
    before = pb.SessionConfig()
    before.CopyFrom(s.config)
    effects = s.receive(
        1, cmd(1, update_session=pb.UpdateSession(config=pb.SessionConfig(model="other"))), now=0.0
    )
    assert requests(effects) == []
    assert [event.error.code for event in decode(effects)] == ["model_update_unsupported"]
    assert s.config == before
