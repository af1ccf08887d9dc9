"""Session configuration: defaults, validation and partial updates.

``open_session`` may leave anything unset; :func:`resolve_config` fills the server's defaults
and refuses what the server or its engine cannot do. ``update_session`` sends only what
changes; :func:`merge_config` lays it over the configuration in force, field by field at every
depth (so ``turn_detection {threshold: 0.8}`` changes the threshold and keeps the type), and
resolves the result again, so a session's configuration is always complete and valid.
"""

from __future__ import annotations

from google.protobuf.message import Message

from omni_grpc.core.errors import CommandError
from omni_grpc.core.limits import EngineFeatures, Limits
from omni_grpc.core.tools import check_tool_choice
from omni_grpc.core.transcription import change_type, resolve_transcription
from omni_grpc.core.turn_taking import resolve_interruption, resolve_turn_detection
from omni_grpc.core.validation import check_config
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import (
    CANONICAL_OUTPUT_RATE_HZ,
    G711_RATE_HZ,
    SUPPORTED_ENCODINGS,
    SUPPORTED_RATES_HZ,
)

# The input rate when none is asked for: OpenAI Realtime's pcm16 rate, which stock clients
# assume (the same rate the engines' canonical output has).
DEFAULT_INPUT_RATE_HZ = CANONICAL_OUTPUT_RATE_HZ
_G711 = (pb.AUDIO_ENCODING_G711_ULAW, pb.AUDIO_ENCODING_G711_ALAW)


def _refuse(code: str, message: str, param: str) -> CommandError:
    return CommandError(code, message, param=param)


def _resolve_input_format(fmt: pb.AudioFormat, engine: EngineFeatures) -> None:
    if fmt.encoding == pb.AUDIO_ENCODING_UNSPECIFIED:
        fmt.encoding = pb.AUDIO_ENCODING_PCM16
    if fmt.encoding not in engine.input_encodings:
        raise _refuse(
            "unsupported_audio_format", "input encoding not accepted", "input_audio_format.encoding"
        )
    if fmt.sample_rate_hz == 0:
        fmt.sample_rate_hz = G711_RATE_HZ if fmt.encoding in _G711 else DEFAULT_INPUT_RATE_HZ
    if fmt.sample_rate_hz not in engine.input_sample_rates_hz:
        raise _refuse(
            "unsupported_audio_format",
            f"input rate {fmt.sample_rate_hz} Hz not accepted",
            "input_audio_format.sample_rate_hz",
        )


def _resolve_output_format(fmt: pb.AudioFormat, engine: EngineFeatures) -> None:
    if fmt.encoding == pb.AUDIO_ENCODING_UNSPECIFIED:
        fmt.encoding = engine.output_encoding
    # Output is converted from the engine's form at the edge, so any supported format can be
    # asked for.
    if fmt.encoding not in SUPPORTED_ENCODINGS:
        raise _refuse(
            "unsupported_audio_format",
            "output encoding not supported",
            "output_audio_format.encoding",
        )
    if fmt.sample_rate_hz == 0:
        fmt.sample_rate_hz = G711_RATE_HZ if fmt.encoding in _G711 else engine.output_sample_rate_hz
    if fmt.sample_rate_hz not in SUPPORTED_RATES_HZ:
        raise _refuse(
            "unsupported_audio_format",
            f"output rate {fmt.sample_rate_hz} Hz not supported",
            "output_audio_format.sample_rate_hz",
        )


def resolve_config(
    requested: pb.SessionConfig, limits: Limits, engine: EngineFeatures
) -> pb.SessionConfig:
    """Returns a complete, valid copy of ``requested``, or raises CommandError."""
    check_config(requested)
    config = pb.SessionConfig()
    config.CopyFrom(requested)
    config.model = config.model or engine.default_model
    if not config.output_modalities:
        config.output_modalities.append(pb.MODALITY_AUDIO)
    for modality in config.output_modalities:
        if modality not in (pb.MODALITY_AUDIO, pb.MODALITY_TEXT):
            raise _refuse("invalid_session_config", "unknown output modality", "output_modalities")
    if len(config.instructions) > limits.max_text_chars:
        raise _refuse("invalid_session_config", "instructions too long", "instructions")
    _resolve_input_format(config.input_audio_format, engine)
    _resolve_output_format(config.output_audio_format, engine)
    resolve_turn_detection(config, engine)
    resolve_transcription(config, engine)
    vad = config.turn_detection.type in (
        pb.TURN_DETECTION_TYPE_SERVER_VAD,
        pb.TURN_DETECTION_TYPE_SEMANTIC_VAD,
    )
    if config.overlap_policy == pb.OVERLAP_POLICY_UNSPECIFIED:
        config.overlap_policy = (
            pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH
            if vad and engine.supports_barge_in
            else pb.OVERLAP_POLICY_LISTEN_ONLY
        )
    if (
        config.overlap_policy == pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH
        and not engine.supports_barge_in
    ):
        raise _refuse("barge_in_unsupported", "this engine cannot barge in", "overlap_policy")
    resolve_interruption(config, engine)
    if config.playback_commit_policy == pb.PLAYBACK_COMMIT_POLICY_UNSPECIFIED:
        config.playback_commit_policy = pb.PLAYBACK_COMMIT_POLICY_COMMIT_ALL_ON_DONE
    idle_s = config.idle_timeout.ToMilliseconds() / 1000
    if idle_s == 0:
        config.idle_timeout.FromMilliseconds(int(limits.idle_timeout_s * 1000))
    elif not 0 < idle_s <= limits.max_idle_timeout_s:
        raise _refuse(
            "invalid_session_config",
            f"idle_timeout must be in (0, {limits.max_idle_timeout_s:g}] s",
            "idle_timeout",
        )
    if config.HasField("temperature") and not 0.0 <= config.temperature <= 2.0:
        raise _refuse("invalid_session_config", "temperature must be in [0, 2]", "temperature")
    if config.tool_choice.mode == pb.TOOL_CHOICE_MODE_UNSPECIFIED:
        config.tool_choice.mode = pb.TOOL_CHOICE_MODE_AUTO
    check_tool_choice(config.tool_choice, config.tools, "tool_choice")
    _resolve_noise_reduction(config.noise_reduction, engine)
    if not config.HasField("parallel_tool_calls"):
        # OpenAI's default: a response may call several functions (where its model would).
        config.parallel_tool_calls = True
    _resolve_truncation(config.truncation, engine)
    return config


def _resolve_truncation(truncation: pb.Truncation, engine: EngineFeatures) -> None:
    """Fills OpenAI's default (auto), and refuses what the engine cannot count: an engine
    without ``supports_truncation`` honours auto without a token limit alone."""
    if truncation.type == pb.TRUNCATION_TYPE_UNSPECIFIED:
        truncation.type = pb.TRUNCATION_TYPE_AUTO
    plain_auto = truncation.type == pb.TRUNCATION_TYPE_AUTO and not truncation.HasField(
        "post_instructions_token_limit"
    )
    if not plain_auto and not engine.supports_truncation:
        raise _refuse(
            "unsupported_truncation",
            f"the {engine.name} engine honours auto truncation alone",
            "truncation",
        )


def _resolve_noise_reduction(reduction: pb.NoiseReduction, engine: EngineFeatures) -> None:
    """Off unless asked for; a type the engine does not run is refused, typed."""
    if reduction.type == pb.NOISE_REDUCTION_TYPE_UNSPECIFIED:
        reduction.type = pb.NOISE_REDUCTION_TYPE_OFF
    if reduction.type == pb.NOISE_REDUCTION_TYPE_OFF:
        return
    if reduction.type not in pb.NoiseReductionType.values():
        raise _refuse(
            "invalid_session_config", "unknown noise reduction type", "noise_reduction.type"
        )
    if reduction.type not in engine.noise_reduction_types:
        name = pb.NoiseReductionType.Name(reduction.type).removeprefix("NOISE_REDUCTION_TYPE_")
        raise _refuse(
            "unsupported_noise_reduction",
            f"the {engine.name} engine does not run {name.lower()} noise reduction",
            "noise_reduction.type",
        )


# The server's recording policies (``omni-grpc serve --record``): none, every session, or the
# sessions whose configuration asks (``SessionConfig.recording.enabled``).
RECORDING_POLICIES = ("off", "all", "on-request")


def resolve_recording(config: pb.SessionConfig, policy: str) -> None:
    """Puts in ``config.recording`` whether the session is recorded under ``policy``: the field
    is left out where the server records nothing, so such a server's sessions look as before;
    ``omit_audio`` and ``omit_text`` stay as asked."""
    if policy == "off":
        config.ClearField("recording")
    elif policy == "all":
        config.recording.enabled = True
    elif not config.recording.HasField("enabled"):
        config.recording.enabled = False


def merge_config(
    current: pb.SessionConfig, patch: pb.SessionConfig, limits: Limits, engine: EngineFeatures
) -> pb.SessionConfig:
    """Lays the set fields of ``patch`` over ``current`` and resolves the result."""
    if patch.model and patch.model != current.model:
        raise _refuse("model_update_unsupported", "a session cannot change its model", "model")
    merged = pb.SessionConfig()
    merged.CopyFrom(current)
    change_type(merged, patch)
    _merge_set_fields(merged, patch)
    return resolve_config(merged, limits, engine)


# Values that only make sense whole: a duration, a free-form options object.
# A tool list, a tool choice, the transcription settings and a truncation are replaced whole too
# (an update that sets an empty ToolSet removes every tool; a new choice drops the function a
# named one had; transcription set with ``enabled`` false turns transcripts off; a new
# truncation type drops the ratio and limit of the old one).
_ATOMIC = frozenset(
    {
        "google.protobuf.Duration",
        "google.protobuf.Struct",
        "omni.duplex.v1.ToolSet",
        "omni.duplex.v1.ToolChoice",
        "omni.duplex.v1.InputTranscriptionConfig",
        "omni.duplex.v1.Truncation",
    }
)


def _merge_set_fields(target: Message, patch: Message) -> None:
    """Copies what ``patch`` sets into ``target``, descending into nested messages, so an
    unset or _UNSPECIFIED field at any depth keeps its current value."""
    for descriptor, value in patch.ListFields():
        name = descriptor.name
        if descriptor.is_repeated:
            del getattr(target, name)[:]
            getattr(target, name).extend(value)
        elif descriptor.message_type is None:
            setattr(target, name, value)
        elif descriptor.message_type.full_name in _ATOMIC:
            getattr(target, name).CopyFrom(value)
        else:
            _merge_set_fields(getattr(target, name), value)
