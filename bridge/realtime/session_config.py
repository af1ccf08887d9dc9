"""Inbound: a ``session.update`` body (Realtime JSON) → a partial ``pb.SessionConfig``.

Only what the client named is set, because the service lays an update over the configuration
in force. The GA spellings (``audio.input.format`` objects, ``output_modalities``) win over the
beta ones (``input_audio_format`` strings, ``modalities``) when a client sends both. The tables
of names here are the dialect's names for contract values; :mod:`bridge.realtime.session_json`
renders the other way with the same tables turned around.
"""

from __future__ import annotations

from bridge.errors import DialectError
from bridge.realtime.client_events import (
    FormatObject,
    FormatSpec,
    InterruptionJson,
    NoiseReductionJson,
    RetentionRatioJson,
    SessionPatch,
    TranscriptionJson,
    TurnDetectionJson,
    VoiceId,
)
from bridge.realtime.tools import tool_choice, toolset
from omni_grpc.wire import pb
from omni_grpc.wire.names import OVERLAP_POLICIES
from omni_grpc.wire.pcm import G711_RATE_HZ

_PCM16 = pb.AUDIO_ENCODING_PCM16
_F32 = pb.AUDIO_ENCODING_PCM_F32
_ULAW = pb.AUDIO_ENCODING_G711_ULAW
_ALAW = pb.AUDIO_ENCODING_G711_ALAW
# Every spelling of an encoding that clients use: GA MIME types, beta names, and the
# reference's aliases. Our own name for float PCM, which OpenAI lacks, is "audio/pcm-f32le".
ENCODINGS: dict[str, pb.AudioEncoding.ValueType] = {
    "audio/pcm": _PCM16,
    "pcm16": _PCM16,
    "pcm": _PCM16,
    "pcm_s16le": _PCM16,
    "s16le": _PCM16,
    "audio/pcm-f32le": _F32,
    "pcm_f32le": _F32,
    "f32le": _F32,
    "audio/pcmu": _ULAW,
    "g711_ulaw": _ULAW,
    "ulaw": _ULAW,
    "mulaw": _ULAW,
    "g711-ulaw": _ULAW,
    "audio/pcma": _ALAW,
    "g711_alaw": _ALAW,
    "alaw": _ALAW,
    "g711-alaw": _ALAW,
}
MODALITIES: dict[str, pb.Modality.ValueType] = {
    "audio": pb.MODALITY_AUDIO,
    "text": pb.MODALITY_TEXT,
}
COMMIT_POLICIES = {
    "commit_all_on_done": pb.PLAYBACK_COMMIT_POLICY_COMMIT_ALL_ON_DONE,
    "ack_only": pb.PLAYBACK_COMMIT_POLICY_ACK_ONLY,
}
_VAD_TYPES = {
    "server_vad": pb.TURN_DETECTION_TYPE_SERVER_VAD,
    "semantic_vad": pb.TURN_DETECTION_TYPE_SEMANTIC_VAD,
}
EAGERNESS = {
    "low": pb.EAGERNESS_LOW,
    "medium": pb.EAGERNESS_MEDIUM,
    "high": pb.EAGERNESS_HIGH,
    "auto": pb.EAGERNESS_AUTO,
}
NOISE_REDUCTION_TYPES = {
    "near_field": pb.NOISE_REDUCTION_TYPE_NEAR_FIELD,
    "far_field": pb.NOISE_REDUCTION_TYPE_FAR_FIELD,
}
INTERRUPTION_MODES = {
    "speech": pb.INTERRUPTION_MODE_SPEECH,
    "words": pb.INTERRUPTION_MODE_WORDS,
}


def audio_format(spec: FormatSpec, param: str) -> pb.AudioFormat:
    """Reads a format object or string; raises ``unsupported_audio_format`` for others."""
    if isinstance(spec, FormatObject):
        name, rate = spec.encoding or spec.type, spec.rate or spec.sample_rate_hz or 0
        if spec.rate and spec.sample_rate_hz and spec.rate != spec.sample_rate_hz:
            raise DialectError(
                "unsupported_audio_format", "rate and sample_rate_hz disagree", param=param
            )
    else:
        name, rate = spec, 0
    encoding = ENCODINGS.get(name.lower())
    if encoding is None:
        raise DialectError(
            "unsupported_audio_format", f"unknown audio format {name!r}", param=param
        )
    if encoding in (_ULAW, _ALAW):
        # G.711 is 8 kHz by definition, and its GA object names no rate; said outright, so
        # that an update from another format does not keep that format's rate.
        rate = rate or G711_RATE_HZ
    return pb.AudioFormat(encoding=encoding, sample_rate_hz=rate)


def _turn_detection(td: TurnDetectionJson | None) -> pb.TurnDetection:
    # GA replaces turn detection whole, so an idle timeout the object does not name is off
    # (0), not kept from before as a partial update would keep it.
    if td is None:
        return pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_NONE, idle_timeout_ms=0)
    if td.type not in _VAD_TYPES:
        raise DialectError(
            "unsupported_turn_detection",
            f"unknown turn detection {td.type!r}",
            param="turn_detection.type",
        )
    out = pb.TurnDetection(
        type=_VAD_TYPES[td.type],
        threshold=td.threshold or 0.0,
        prefix_padding_ms=td.prefix_padding_ms or 0,
        silence_duration_ms=td.silence_duration_ms or 0,
        idle_timeout_ms=td.idle_timeout_ms or 0,
    )
    if td.type == "semantic_vad":
        # GA's semantic_vad without an eagerness is "auto". The service serves it (or its
        # stand-in where the engine cannot judge words) and clears it for other types.
        out.eagerness = EAGERNESS[td.eagerness or "auto"]
    if td.create_response is not None:
        out.create_response = td.create_response
    if td.interrupt_response is not None:
        out.interrupt_response = td.interrupt_response
    return out


def _interruption(rules: InterruptionJson) -> pb.InterruptionConfig:
    """The extension's ``interruption`` as the contract's; the service checks the bounds."""
    out = pb.InterruptionConfig(
        mode=INTERRUPTION_MODES[rules.mode] if rules.mode else pb.INTERRUPTION_MODE_UNSPECIFIED,
        false_interruption_timeout_ms=rules.false_interruption_timeout_ms or 0,
    )
    for name in ("min_duration_ms", "min_words", "resume_false_interruption"):
        value = getattr(rules, name)
        if value is not None:
            setattr(out, name, value)
    return out


# OpenAI's transcription models (the GA SDK's names): a stock client names one of them, which
# means "transcribe" rather than a model this service has, so each becomes the engine's
# default. Any other name is the engine's to know (Capabilities.transcription_models).
OPENAI_TRANSCRIPTION_MODELS = frozenset(
    {
        "whisper-1",
        "gpt-transcribe",
        "gpt-live-transcribe",
        "gpt-4o-mini-transcribe",
        "gpt-4o-mini-transcribe-2025-12-15",
        "gpt-4o-transcribe",
        "gpt-4o-transcribe-diarize",
        "gpt-realtime-whisper",
    }
)
SESSION_TYPES = {
    "realtime": pb.SESSION_TYPE_REALTIME,
    "transcription": pb.SESSION_TYPE_TRANSCRIPTION,
}
LOGPROBS_INCLUDE = "item.input_audio_transcription.logprobs"


def _transcription(tr: TranscriptionJson | None) -> pb.InputTranscriptionConfig:
    if tr is None:
        return pb.InputTranscriptionConfig(enabled=False)
    model = tr.model or ""
    return pb.InputTranscriptionConfig(
        enabled=True,
        model="" if model in OPENAI_TRANSCRIPTION_MODELS else model,
        language=tr.language or "",
        prompt=tr.prompt or "",
    )


def _noise_reduction(reduction: NoiseReductionJson | None) -> pb.NoiseReduction:
    if reduction is None:
        return pb.NoiseReduction(type=pb.NOISE_REDUCTION_TYPE_OFF)
    return pb.NoiseReduction(type=NOISE_REDUCTION_TYPES[reduction.type])


def config_from_patch(patch: SessionPatch) -> pb.SessionConfig:
    """Translates a ``session.update`` body into the fields of a partial SessionConfig."""
    if patch.type is not None and patch.type not in SESSION_TYPES:
        raise DialectError(
            "unsupported_session_type",
            f"session type {patch.type!r} is not served here",
            param="session.type",
        )
    config = pb.SessionConfig(model=patch.model or "")
    if patch.type is not None:
        config.type = SESSION_TYPES[patch.type]
    if patch.include is not None:  # [] turns the logprobs off again
        config.transcription_logprobs = LOGPROBS_INCLUDE in patch.include
    modalities = patch.output_modalities or patch.modalities or []
    config.output_modalities.extend(MODALITIES[name] for name in modalities)
    if patch.instructions is not None:
        config.instructions = patch.instructions
    audio_in = patch.audio.input if patch.audio else None
    audio_out = patch.audio.output if patch.audio else None
    in_format = (audio_in.format if audio_in else None) or patch.input_audio_format
    if in_format is not None:
        config.input_audio_format.CopyFrom(audio_format(in_format, "session.audio.input.format"))
    out_format = (audio_out.format if audio_out else None) or patch.output_audio_format
    if out_format is not None:
        config.output_audio_format.CopyFrom(audio_format(out_format, "session.audio.output.format"))
    voice = (audio_out.voice if audio_out else None) or patch.voice
    if voice is not None:
        config.voice = voice.id if isinstance(voice, VoiceId) else voice
    # null turns these off and absence leaves them alone, so ask which fields were sent.
    if audio_in is not None and "turn_detection" in audio_in.model_fields_set:
        config.turn_detection.CopyFrom(_turn_detection(audio_in.turn_detection))
    elif "turn_detection" in patch.model_fields_set:
        config.turn_detection.CopyFrom(_turn_detection(patch.turn_detection))
    if audio_in is not None and "transcription" in audio_in.model_fields_set:
        config.input_transcription.CopyFrom(_transcription(audio_in.transcription))
    elif "input_audio_transcription" in patch.model_fields_set:
        config.input_transcription.CopyFrom(_transcription(patch.input_audio_transcription))
    if audio_in is not None and "noise_reduction" in audio_in.model_fields_set:
        config.noise_reduction.CopyFrom(_noise_reduction(audio_in.noise_reduction))
    elif "input_audio_noise_reduction" in patch.model_fields_set:
        config.noise_reduction.CopyFrom(_noise_reduction(patch.input_audio_noise_reduction))
    max_tokens = (
        patch.max_output_tokens
        if patch.max_output_tokens is not None
        else patch.max_response_output_tokens
    )
    if isinstance(max_tokens, int):  # "inf" is the default: nothing to cap
        if max_tokens <= 0:
            raise DialectError(
                "invalid_session_config",
                "max_output_tokens must be positive",
                param="session.max_output_tokens",
            )
        config.max_output_tokens = max_tokens
    if patch.temperature is not None:
        config.temperature = patch.temperature
    if patch.overlap_policy is not None:
        config.overlap_policy = OVERLAP_POLICIES[patch.overlap_policy]
    if patch.interruption is not None:
        config.interruption.CopyFrom(_interruption(patch.interruption))
    if patch.playback_commit_policy is not None:
        config.playback_commit_policy = COMMIT_POLICIES[patch.playback_commit_policy]
    if patch.idle_timeout_ms is not None:
        config.idle_timeout.FromMilliseconds(patch.idle_timeout_ms)
    elif patch.idle_timeout_s is not None:
        config.idle_timeout.FromMilliseconds(round(patch.idle_timeout_s * 1000))
    if patch.engine_options:
        config.engine_options.update(patch.engine_options)
    if patch.recording is not None:  # asks to be recorded (both dialects read this)
        config.recording.CopyFrom(pb.SessionRecording(**patch.recording.model_dump()))
    if patch.tools is not None:  # an empty list is sent too: it removes every tool
        config.tools.CopyFrom(toolset(patch.tools, "session.tools"))
    if patch.tool_choice is not None:
        config.tool_choice.CopyFrom(tool_choice(patch.tool_choice, "session.tool_choice"))
    if patch.parallel_tool_calls is not None:
        config.parallel_tool_calls = patch.parallel_tool_calls
    if patch.truncation is not None:
        config.truncation.CopyFrom(_truncation(patch.truncation))
    return config


def _truncation(truncation: str | RetentionRatioJson) -> pb.Truncation:
    """GA's ``truncation``: "auto", "disabled", or a retention ratio with its limits."""
    if truncation == "auto":
        return pb.Truncation(type=pb.TRUNCATION_TYPE_AUTO)
    if truncation == "disabled":
        return pb.Truncation(type=pb.TRUNCATION_TYPE_DISABLED)
    assert isinstance(truncation, RetentionRatioJson)
    out = pb.Truncation(
        type=pb.TRUNCATION_TYPE_RETENTION_RATIO, retention_ratio=truncation.retention_ratio
    )
    limits = truncation.token_limits
    if limits is not None and limits.post_instructions is not None:
        out.post_instructions_token_limit = limits.post_instructions
    return out
