"""Outbound: a ``pb.Session`` and ``pb.Capabilities`` → the Realtime JSON shapes.

The resolved configuration is rendered in the GA ``session`` shape, plus the duplex extensions
(``overlap_policy``, ``playback_commit_policy``, ``interruption``, ``idle_timeout_ms``, and
``recording`` on a server that records: whether this session is) and the session's state.
OpenAI's schema knows pcm16 at one rate only; a session at another rate or in float PCM is
rendered in fields the GA format object tolerates (:func:`format_json`). Names are those of
:mod:`bridge.realtime.session_config`, turned around, so the two directions cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from bridge.realtime.session_config import (
    COMMIT_POLICIES,
    EAGERNESS,
    ENCODINGS,
    INTERRUPTION_MODES,
    LOGPROBS_INCLUDE,
    MODALITIES,
    NOISE_REDUCTION_TYPES,
)
from bridge.realtime.tools import session_tools_json
from omni_grpc.wire import pb
from omni_grpc.wire.names import OVERLAP_POLICIES

# The GA MIME type of each encoding: its one "audio/" spelling among those clients may send.
_FORMAT_TYPES = {value: name for name, value in ENCODINGS.items() if name.startswith("audio/")}
# G.711 has a fixed rate, so its format object names none.
_FIXED_RATE = frozenset({pb.AUDIO_ENCODING_G711_ULAW, pb.AUDIO_ENCODING_G711_ALAW})
# The one rate GA's audio/pcm may name, and the ``encoding`` that marks float PCM.
GA_PCM_RATE_HZ = 24000
F32_ENCODING = "pcm_f32le"
MODALITY_NAMES = {value: name for name, value in MODALITIES.items()}
OVERLAP_POLICY_NAMES = {value: name for name, value in OVERLAP_POLICIES.items()}
_COMMIT_NAMES = {value: name for name, value in COMMIT_POLICIES.items()}
EAGERNESS_NAMES = {value: name for name, value in EAGERNESS.items()}
_INTERRUPTION_MODE_NAMES = {value: name for name, value in INTERRUPTION_MODES.items()}
_NOISE_REDUCTION_NAMES = {value: name for name, value in NOISE_REDUCTION_TYPES.items()}
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


def format_json(fmt: pb.AudioFormat) -> dict[str, Any]:
    """Renders a format as a GA format object that validates against OpenAI's schema.

    GA knows ``audio/pcm`` (16-bit) at 24 kHz only, and G.711. Any other rate travels in
    ``sample_rate_hz`` instead of ``rate``, and float PCM as ``audio/pcm`` with ``encoding``
    ``pcm_f32le``: fields the GA format objects tolerate, so the object stays valid for a
    stock client and never claims a rate that is not in force.
    """
    if fmt.encoding in _FIXED_RATE:
        return {"type": _FORMAT_TYPES[fmt.encoding]}
    out: dict[str, Any] = {"type": "audio/pcm"}
    if fmt.encoding == pb.AUDIO_ENCODING_PCM_F32:
        out["encoding"] = F32_ENCODING
    if fmt.encoding == pb.AUDIO_ENCODING_PCM16 and fmt.sample_rate_hz == GA_PCM_RATE_HZ:
        out["rate"] = GA_PCM_RATE_HZ
    else:
        out["sample_rate_hz"] = fmt.sample_rate_hz
    return out


def _turn_detection_json(td: pb.TurnDetection) -> dict[str, Any] | None:
    common = {"create_response": td.create_response, "interrupt_response": td.interrupt_response}
    if td.type == pb.TURN_DETECTION_TYPE_SEMANTIC_VAD:
        # GA's semantic_vad has no idle timeout: extension clients see it here, and
        # bridge.realtime.plain takes it out for the others.
        return {
            "type": "semantic_vad",
            "eagerness": EAGERNESS_NAMES.get(td.eagerness, "auto"),
            **common,
            "idle_timeout_ms": td.idle_timeout_ms or None,
        }
    if td.type != pb.TURN_DETECTION_TYPE_SERVER_VAD:
        return None
    return {
        "type": "server_vad",
        "threshold": td.threshold,
        "prefix_padding_ms": td.prefix_padding_ms,
        "silence_duration_ms": td.silence_duration_ms,
        **common,
        "idle_timeout_ms": td.idle_timeout_ms or None,
    }


def _interruption_json(rules: pb.InterruptionConfig) -> dict[str, Any]:
    return {
        "mode": _INTERRUPTION_MODE_NAMES.get(rules.mode, "speech"),
        "min_duration_ms": rules.min_duration_ms,
        "min_words": rules.min_words,
        "resume_false_interruption": rules.resume_false_interruption,
        "false_interruption_timeout_ms": rules.false_interruption_timeout_ms,
    }


def _transcription_json(tr: pb.InputTranscriptionConfig) -> dict[str, Any] | None:
    if not tr.enabled:
        return None
    return {
        "model": tr.model or None,
        "language": tr.language or None,
        "prompt": tr.prompt or None,
    }


def _transcription_session_json(session: pb.Session) -> dict[str, Any]:
    """A transcription session in GA's shape (``RealtimeTranscriptionSessionCreateRequest``):
    input audio and its transcription, no model, output or responses; plus the extensions."""
    config = session.config
    return {
        "type": "transcription",
        "object": "realtime.transcription_session",
        "id": session.id,
        "audio": {
            "input": {
                "format": format_json(config.input_audio_format),
                "turn_detection": _turn_detection_json(config.turn_detection),
                "transcription": _transcription_json(config.input_transcription),
                "noise_reduction": _noise_reduction_json(config.noise_reduction),
            }
        },
        "include": [LOGPROBS_INCLUDE] if config.transcription_logprobs else None,
        **_duplex_extensions(session),
    }


def _noise_reduction_json(reduction: pb.NoiseReduction) -> dict[str, str] | None:
    """GA's ``noise_reduction``: the type in force, None when off."""
    name = _NOISE_REDUCTION_NAMES.get(reduction.type)
    return {"type": name} if name is not None else None


def _duplex_extensions(session: pb.Session) -> dict[str, Any]:
    """What a session object of either type shows beyond GA's fields (extension clients)."""
    config = session.config
    return {
        "overlap_policy": OVERLAP_POLICY_NAMES.get(config.overlap_policy),
        "playback_commit_policy": _COMMIT_NAMES.get(config.playback_commit_policy),
        "interruption": _interruption_json(config.interruption),
        "idle_timeout_ms": config.idle_timeout.ToMilliseconds(),
        "state": _STATE_NAMES.get(session.state),
        "turn_state": _TURN_NAMES.get(session.turn_state),
        "epoch": session.epoch,
        # GA's session object has no place for it: shown to extension clients only.
        "parallel_tool_calls": config.parallel_tool_calls,
    }


def session_json(session: pb.Session) -> dict[str, Any]:
    """Renders a session in the GA ``session`` shape plus the duplex extensions."""
    config = session.config
    if config.type == pb.SESSION_TYPE_TRANSCRIPTION:
        return _transcription_session_json(session)
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
                "transcription": _transcription_json(config.input_transcription),
                "noise_reduction": _noise_reduction_json(config.noise_reduction),
            },
            "output": audio_output,
        },
        "max_output_tokens": (
            config.max_output_tokens if config.HasField("max_output_tokens") else "inf"
        ),
        **_duplex_extensions(session),
    }
    if config.transcription_logprobs:
        out["include"] = [LOGPROBS_INCLUDE]
    truncation = truncation_json(config.truncation)
    if truncation is not None:
        out["truncation"] = truncation
    if config.HasField("instructions"):
        out["instructions"] = config.instructions
    if config.HasField("temperature"):
        out["temperature"] = config.temperature
    out.update(session_tools_json(config))
    if config.HasField("engine_options"):
        out["engine_options"] = json_format.MessageToDict(config.engine_options)
    if config.HasField("recording"):  # a server that records says whether this session is
        recording = config.recording
        out["recording"] = {
            "enabled": recording.enabled,
            "omit_audio": recording.omit_audio,
            "omit_text": recording.omit_text,
        }
    return out


def truncation_json(truncation: pb.Truncation) -> str | dict[str, Any] | None:
    """GA's ``truncation`` of the session in force: "auto", "disabled" or the retention
    object. An auto with a token limit (which a gRPC client may set and GA cannot say) shows
    as "auto"; None where unset (a configuration the core has not resolved)."""
    if truncation.type == pb.TRUNCATION_TYPE_DISABLED:
        return "disabled"
    if truncation.type == pb.TRUNCATION_TYPE_RETENTION_RATIO:
        out: dict[str, Any] = {
            "type": "retention_ratio",
            "retention_ratio": truncation.retention_ratio,
        }
        if truncation.HasField("post_instructions_token_limit"):
            out["token_limits"] = {"post_instructions": truncation.post_instructions_token_limit}
        return out
    if truncation.type == pb.TRUNCATION_TYPE_AUTO:
        return "auto"
    return None


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
        "supports_semantic_vad": caps.supports_semantic_vad,
        "supports_interruption_by_words": caps.supports_interruption_by_words,
        "supports_parallel_tool_calls": caps.supports_parallel_tool_calls,
        "supports_input_audio_items": caps.supports_input_audio_items,
        "item_audio_kept_ms": caps.item_audio_kept_ms,
        "supports_out_of_band_responses": caps.supports_out_of_band_responses,
        "out_of_band_beside_response": caps.out_of_band_beside_response,
        "transcription_models": list(caps.transcription_models),
        "supports_transcription_logprobs": caps.supports_transcription_logprobs,
        "supports_truncation": caps.supports_truncation,
        "noise_reduction_types": [
            _NOISE_REDUCTION_NAMES[kind]
            for kind in caps.noise_reduction_types
            if kind in _NOISE_REDUCTION_NAMES
        ],
        "max_pending_input_bytes": caps.max_pending_input_bytes,
        "max_sessions": caps.max_sessions,
    }
