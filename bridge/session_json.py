"""Session configuration between the Realtime JSON shape and ``pb.SessionConfig``.

Inbound, a ``session.update`` patch becomes a partial ``SessionConfig``: only what the client
named is set, because the service lays an update over the configuration in force. The GA
spellings (``audio.input.format`` objects, ``output_modalities``) win over the beta ones
(``input_audio_format`` strings, ``modalities``) when a client sends both. Outbound, the
resolved configuration is rendered in the GA shape, plus the duplex extensions
(``overlap_policy``, ``playback_commit_policy``, ``idle_timeout_ms``) and the session's state.
OpenAI's schema knows pcm16 at 24 kHz only; a session at another rate is rendered with its true
rate (``{"type": "audio/pcm", "rate": 16000}``), which is our extension of that schema.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from bridge.client_events import (
    FormatObject,
    FormatSpec,
    SessionPatch,
    TranscriptionJson,
    TurnDetectionJson,
    VoiceId,
)
from bridge.errors import DialectError
from omni_grpc.wire import pb

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
_FORMAT_TYPES = {
    _PCM16: "audio/pcm",
    _F32: "audio/pcm-f32le",
    _ULAW: "audio/pcmu",
    _ALAW: "audio/pcma",
}
MODALITIES: dict[str, pb.Modality.ValueType] = {
    "audio": pb.MODALITY_AUDIO,
    "text": pb.MODALITY_TEXT,
}
MODALITY_NAMES = {value: name for name, value in MODALITIES.items()}
_OVERLAP = {
    "listen_only": pb.OVERLAP_POLICY_LISTEN_ONLY,
    "barge_in_on_speech": pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH,
}
_OVERLAP_NAMES = {value: name for name, value in _OVERLAP.items()}
_COMMIT = {
    "commit_all_on_done": pb.PLAYBACK_COMMIT_POLICY_COMMIT_ALL_ON_DONE,
    "ack_only": pb.PLAYBACK_COMMIT_POLICY_ACK_ONLY,
}
_COMMIT_NAMES = {value: name for name, value in _COMMIT.items()}
_STATE_NAMES = {
    pb.SESSION_STATE_ATTACHED: "attached",
    pb.SESSION_STATE_DETACHED: "detached",
    pb.SESSION_STATE_CLOSED: "closed",
    pb.SESSION_STATE_EXPIRED: "expired",
}
_TURN_NAMES = {
    pb.TURN_STATE_IDLE: "idle",
    pb.TURN_STATE_USER_SPEAKING: "user_speaking",
    pb.TURN_STATE_ASSISTANT_RESPONDING: "assistant_responding",
}
# OpenAI's semantic VAD has no counterpart here; the engine's VAD ends turns instead.
_VAD_TYPES = ("server_vad", "semantic_vad")


def audio_format(spec: FormatSpec, param: str) -> pb.AudioFormat:
    """Reads a format object or string; raises ``unsupported_audio_format`` for others."""
    name, rate = (spec.type, spec.rate or 0) if isinstance(spec, FormatObject) else (spec, 0)
    encoding = ENCODINGS.get(name.lower())
    if encoding is None:
        raise DialectError(
            "unsupported_audio_format", f"unknown audio format {name!r}", param=param
        )
    return pb.AudioFormat(encoding=encoding, sample_rate_hz=rate)


def format_json(fmt: pb.AudioFormat) -> dict[str, Any]:
    """Renders a format as a GA format object (G.711 has a fixed rate and names none)."""
    if fmt.encoding in (_ULAW, _ALAW):
        return {"type": _FORMAT_TYPES[fmt.encoding]}
    return {"type": _FORMAT_TYPES.get(fmt.encoding, "audio/pcm"), "rate": fmt.sample_rate_hz}


def _turn_detection(td: TurnDetectionJson | None) -> pb.TurnDetection:
    if td is None:
        return pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_NONE)
    if td.type not in _VAD_TYPES:
        raise DialectError(
            "unsupported_turn_detection",
            f"unknown turn detection {td.type!r}",
            param="turn_detection.type",
        )
    out = pb.TurnDetection(
        type=pb.TURN_DETECTION_TYPE_SERVER_VAD,
        threshold=td.threshold or 0.0,
        prefix_padding_ms=td.prefix_padding_ms or 0,
        silence_duration_ms=td.silence_duration_ms or 0,
    )
    if td.create_response is not None:
        out.create_response = td.create_response
    if td.interrupt_response is not None:
        out.interrupt_response = td.interrupt_response
    return out


def _transcription(tr: TranscriptionJson | None) -> pb.InputTranscriptionConfig:
    if tr is None:
        return pb.InputTranscriptionConfig(enabled=False)
    return pb.InputTranscriptionConfig(
        enabled=True, model=tr.model or "", language=tr.language or ""
    )


def config_from_patch(patch: SessionPatch) -> pb.SessionConfig:
    """Translates a ``session.update`` body into the fields of a partial SessionConfig."""
    if patch.type not in (None, "realtime"):
        raise DialectError(
            "unsupported_session_type",
            f"session type {patch.type!r} is not served here",
            param="session.type",
        )
    config = pb.SessionConfig(model=patch.model or "")
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
        config.overlap_policy = _OVERLAP[patch.overlap_policy]
    if patch.playback_commit_policy is not None:
        config.playback_commit_policy = _COMMIT[patch.playback_commit_policy]
    if patch.idle_timeout_ms is not None:
        config.idle_timeout.FromMilliseconds(patch.idle_timeout_ms)
    elif patch.idle_timeout_s is not None:
        config.idle_timeout.FromMilliseconds(round(patch.idle_timeout_s * 1000))
    if patch.engine_options:
        config.engine_options.update(patch.engine_options)
    return config


def _turn_detection_json(td: pb.TurnDetection) -> dict[str, Any] | None:
    if td.type != pb.TURN_DETECTION_TYPE_SERVER_VAD:
        return None
    return {
        "type": "server_vad",
        "threshold": td.threshold,
        "prefix_padding_ms": td.prefix_padding_ms,
        "silence_duration_ms": td.silence_duration_ms,
        "create_response": td.create_response,
        "interrupt_response": td.interrupt_response,
    }


def session_json(session: pb.Session) -> dict[str, Any]:
    """Renders a session in the GA ``session`` shape plus the duplex extensions."""
    config = session.config
    transcription = config.input_transcription
    audio_output: dict[str, Any] = {"format": format_json(config.output_audio_format)}
    if config.HasField("voice"):
        audio_output["voice"] = config.voice
    out: dict[str, Any] = {
        "type": "realtime",
        "object": "realtime.session",
        "id": session.id,
        "model": config.model,
        "output_modalities": [
            MODALITY_NAMES[m] for m in config.output_modalities if m in MODALITY_NAMES
        ],
        "audio": {
            "input": {
                "format": format_json(config.input_audio_format),
                "turn_detection": _turn_detection_json(config.turn_detection),
                "transcription": (
                    {
                        "model": transcription.model or None,
                        "language": transcription.language or None,
                    }
                    if transcription.enabled
                    else None
                ),
            },
            "output": audio_output,
        },
        "max_output_tokens": (
            config.max_output_tokens if config.HasField("max_output_tokens") else "inf"
        ),
        "overlap_policy": _OVERLAP_NAMES.get(config.overlap_policy),
        "playback_commit_policy": _COMMIT_NAMES.get(config.playback_commit_policy),
        "idle_timeout_ms": config.idle_timeout.ToMilliseconds(),
        "state": _STATE_NAMES.get(session.state),
        "turn_state": _TURN_NAMES.get(session.turn_state),
        "epoch": session.epoch,
    }
    if config.HasField("instructions"):
        out["instructions"] = config.instructions
    if config.HasField("temperature"):
        out["temperature"] = config.temperature
    if config.HasField("engine_options"):
        out["engine_options"] = json_format.MessageToDict(config.engine_options)
    return out


def capabilities_json(caps: pb.Capabilities) -> dict[str, Any]:
    """Renders the capabilities handshake with durations in milliseconds."""
    return {
        "protocol_version": caps.protocol_version,
        "engine": caps.engine,
        "input_formats": [_FORMAT_TYPES.get(e, "unknown") for e in caps.input_encodings],
        "input_sample_rates_hz": list(caps.input_sample_rates_hz),
        "output_audio_format": format_json(caps.output_audio_format),
        "max_message_bytes": caps.max_message_bytes,
        "journal_window_ms": caps.journal_window.ToMilliseconds(),
        "journal_max_bytes": caps.journal_max_bytes,
        "disconnect_grace_ms": caps.disconnect_grace.ToMilliseconds(),
        "idle_timeout_ms": caps.idle_timeout.ToMilliseconds(),
        "ack_interval_ms": caps.ack_interval.ToMilliseconds(),
        "supports_resume": caps.supports_resume,
        "supports_barge_in": caps.supports_barge_in,
        "supports_playback_ack": caps.supports_playback_ack,
        "supports_server_vad": caps.supports_server_vad,
        "max_pending_input_bytes": caps.max_pending_input_bytes,
        "max_sessions": caps.max_sessions,
    }
