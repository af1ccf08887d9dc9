"""Outbound: the Realtime server events that one contract event renders on its own, with no state.

:class:`bridge.realtime.outbound.RealtimeOutbound` uses :data:`STATELESS` for every event whose
Realtime form follows from the event alone, and the helpers here (:func:`item_json`,
:func:`response_json`) for the ones it expands itself. :func:`error_json` renders the refusals
the bridge makes itself, in the same shape as the service's errors, and
:func:`refusal_events` those the relay reports.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from bridge.dialect import Event
from bridge.errors import RATE_LIMIT_CODE, Refusal
from bridge.realtime.session_json import (
    EAGERNESS_NAMES,
    MODALITY_NAMES,
    OVERLAP_POLICY_NAMES,
    session_json,
)
from bridge.realtime.tools import CALL_ITEM_TYPES, ITEM_STATUS_NAMES, call_item_json
from omni_grpc.wire import pb
from omni_grpc.wire.names import CONTEXT_LENGTH_EXCEEDED, OVERLAP_ACTIONS, RESPONSE_STATUSES

_ERROR_TYPES = {
    pb.ERROR_TYPE_INVALID_REQUEST: "invalid_request_error",
    pb.ERROR_TYPE_RATE_LIMIT: "rate_limit_error",
    pb.ERROR_TYPE_SERVER: "server_error",
}
# The Realtime name of the limit a rate-limit refusal's ``param`` names. The GA schema knows
# only "requests" and "tokens": commands are requests, and input audio, which OpenAI meters in
# tokens and the service in bytes, is "tokens" (a refusal leaves ``limit`` out, so no unit is
# claimed; after a response it is the service's own count of bytes).
_RATE_LIMIT_NAMES = {"commands": "requests", "audio": "tokens"}
_RESPONSE_STATUS = {status: name for name, status in RESPONSE_STATUSES.items()}
_OVERLAP_ACTION = {action: name for name, action in OVERLAP_ACTIONS.items()}
_ROLE_NAMES = {
    pb.ITEM_ROLE_USER: "user",
    pb.ITEM_ROLE_ASSISTANT: "assistant",
    pb.ITEM_ROLE_SYSTEM: "system",
}
# Our status reasons in OpenAI's vocabulary; the exact one travels as `detail`.
_REASONS = {
    "barge_in": "turn_detected",
    "turn_detected": "turn_detected",
    "client_cancelled": "client_cancelled",
    "output_audio_cleared": "client_cancelled",
    "max_output_tokens": "max_output_tokens",
}
_EXPIRY = {
    pb.EXPIRY_REASON_DISCONNECT_GRACE: "disconnect_grace_expired",
    pb.EXPIRY_REASON_IDLE_TIMEOUT: "idle_ttl_expired",
    pb.EXPIRY_REASON_ENGINE_FAILURE: "engine_failure",
}
_RESYNC = {
    pb.RESYNC_REASON_JOURNAL_GAP: "journal_gap",
    pb.RESYNC_REASON_JOURNAL_OVERFLOW: "journal_overflow",
}


def logprobs_json(logprobs: Sequence[pb.TranscriptLogprob]) -> dict[str, Any]:
    """``{"logprobs": [...]}`` in OpenAI's shape when a transcript event carries them (the
    session asked), else nothing: the field is absent as on OpenAI's server."""
    if not logprobs:
        return {}
    return {
        "logprobs": [
            {"token": each.token, "logprob": each.logprob, "bytes": list(each.bytes)}
            for each in logprobs
        ]
    }


def random_event_id() -> str:
    """An id for an event that is never replayed."""
    return f"event_{uuid.uuid4().hex[:24]}"


def error_json(
    code: str,
    message: str,
    *,
    error_type: str = "invalid_request_error",
    param: str = "",
    event_id: str = "",
) -> Event:
    """OpenAI's nested error event, for refusals the bridge makes itself."""
    return {
        "type": "error",
        "event_id": random_event_id(),
        "error": {
            "type": error_type,
            "code": code,
            "message": message,
            "param": param or None,
            "event_id": event_id or None,
        },
    }


def item_json(item: pb.ConversationItem) -> Event:
    """Renders a conversation item as a Realtime ``message`` item, or a function item."""
    if item.type in CALL_ITEM_TYPES:
        return call_item_json(item)
    content: list[Event] = []
    for part in item.content:
        if part.type == pb.CONTENT_TYPE_INPUT_TEXT:
            content.append({"type": "input_text", "text": part.text})
        elif part.type == pb.CONTENT_TYPE_INPUT_AUDIO:
            audio_part: Event = {"type": "input_audio", "transcript": part.transcript or None}
            if part.audio:  # a retrieved item's, in the session's input format
                audio_part["audio"] = base64.b64encode(part.audio).decode()
            content.append(audio_part)
        elif part.type == pb.CONTENT_TYPE_OUTPUT_TEXT:
            content.append({"type": "output_text", "text": part.text})
        elif part.type == pb.CONTENT_TYPE_OUTPUT_AUDIO:
            content.append({"type": "output_audio", "transcript": part.transcript})
    out: Event = {
        "id": item.id,
        "object": "realtime.item",
        "type": "message",
        "role": _ROLE_NAMES.get(item.role, "user"),
        "content": content,
    }
    if item.status in ITEM_STATUS_NAMES:
        out["status"] = ITEM_STATUS_NAMES[item.status]
    return out


def _status_details(status: str, reason: str) -> Event | None:
    if status in ("in_progress", "completed") and reason in ("", "stop"):
        return None
    details: Event = {"type": status}
    if status == "failed":
        # A conversation over the context under disabled truncation is the request's fault.
        kind = "invalid_request_error" if reason == CONTEXT_LENGTH_EXCEEDED else "server_error"
        details["error"] = {"type": kind, "code": reason or None}
    elif reason in _REASONS:
        details["reason"] = _REASONS[reason]
    if reason:
        details["detail"] = reason
    return details


def response_json(response: pb.Response, output: list[Event]) -> Event:
    """Renders a response, with usage and our per-turn ``latency`` when it has them."""
    status = _RESPONSE_STATUS.get(response.status, "completed")
    modalities = [MODALITY_NAMES[m] for m in response.output_modalities if m in MODALITY_NAMES]
    out: Event = {
        "id": response.id,
        "object": "realtime.response",
        "status": status,
        "status_details": _status_details(status, response.status_reason),
        "output": output,
        "output_modalities": modalities or ["audio"],
        # What response.create's metadata said, returned as OpenAI does (null when none).
        "metadata": dict(response.metadata) or None,
        "usage": None,
    }
    if response.conversation == pb.RESPONSE_CONVERSATION_NONE:
        out["conversation_id"] = None  # out of band: added to no conversation, as OpenAI says
    if response.HasField("max_output_tokens"):  # its own cap, as response.create gave it
        out["max_output_tokens"] = response.max_output_tokens
    if response.voice:  # its own voice, as response.create gave it
        out["audio"] = {"output": {"voice": response.voice}}
    if response.HasField("usage"):
        usage = response.usage
        out["usage"] = {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            # The service counts tokens per direction, not per modality, so only what is
            # known is detailed: no prompt is cached.
            "input_token_details": {"cached_tokens": 0},
            "input_audio_ms": usage.input_audio_ms,
            "output_audio_ms": usage.output_audio_ms,
        }
    if response.HasField("latency"):
        latency = response.latency
        out["latency"] = {
            "first_text_ms": latency.first_text_ms,
            "first_audio_ms": latency.first_audio_ms,
            "total_ms": latency.total_ms,
            "real_time_factor": latency.real_time_factor,
        }
    return out


def with_retry_hint(message: str, retry_after_ms: int) -> str:
    """The message with its retry hint in words, as OpenAI's rate-limit errors carry it: the
    one place a client of the plain dialect finds it (``retry_after_ms`` is an extension)."""
    return f"{message}; try again in {retry_after_ms} ms" if retry_after_ms > 0 else message


def _error(e: pb.ErrorReport) -> list[Event]:
    retry_after_ms = e.retry_after.ToMilliseconds() if e.retryable else 0
    body: Event = {
        "type": _ERROR_TYPES.get(e.type, "invalid_request_error"),
        "code": e.code,
        "message": with_retry_hint(e.message, retry_after_ms),
        "param": e.param or None,
        "event_id": e.event_id or None,
    }
    if e.retryable:
        body["retryable"] = True
        body["retry_after_ms"] = e.retry_after.ToMilliseconds()
    out: list[Event] = [{"type": "error", "error": body}]
    if e.code == RATE_LIMIT_CODE:
        out.append(
            rate_limits_updated(
                _RATE_LIMIT_NAMES.get(e.param, "requests"), e.retry_after.ToMilliseconds()
            )
        )
    return out


def refusal_events(refusal: Refusal) -> list[Event]:
    """An error the bridge tells of itself (a refused event, a stream's end), as OpenAI's nested
    error event. A retry hint is said in words too, as on any rate-limit error, and followed by
    ``rate_limits.updated``: the limit spent is the service's on requests."""
    retry_after_ms = refusal.retry_after_ms
    event = error_json(
        refusal.code,
        with_retry_hint(refusal.message, retry_after_ms),
        error_type=refusal.error_type,
        param=refusal.param,
        event_id=refusal.event_id,
    )
    if not retry_after_ms:
        return [event]
    event["error"].update(retryable=True, retry_after_ms=retry_after_ms)
    limits = rate_limits_updated("requests", retry_after_ms)
    return [event, {**limits, "event_id": random_event_id()}]


def rate_limits_now(limits: Sequence[pb.RateLimit]) -> Event:
    """OpenAI's ``rate_limits.updated`` after a response: each of the session's limits as the
    service read it when the response ended (the limit, what is left, and when it is full)."""
    return {
        "type": "rate_limits.updated",
        "rate_limits": [
            {
                "name": _RATE_LIMIT_NAMES.get(limit.name, "requests"),
                "limit": limit.limit,
                "remaining": limit.remaining,
                "reset_seconds": limit.reset.ToMilliseconds() / 1000,
            }
            for limit in limits
        ],
    }


def rate_limits_updated(name: str, reset_ms: int) -> Event:
    """OpenAI's ``rate_limits.updated`` after a rate-limit refusal: which limit is spent, and
    when it has room again. The service does not say its limit, so ``limit`` is left out (every
    field of a rate limit is optional in the GA schema)."""
    return {
        "type": "rate_limits.updated",
        "rate_limits": [{"name": name, "remaining": 0, "reset_seconds": reset_ms / 1000}],
    }


def _one(kind: str, **fields: Any) -> list[Event]:
    return [{"type": kind, **fields}]


def _overlap_decision(e: pb.OverlapDecision) -> list[Event]:
    return _one(
        "overlap.decision",
        policy=OVERLAP_POLICY_NAMES.get(e.policy),
        action=_OVERLAP_ACTION.get(e.action),
        reason=e.reason,
        response_id=e.response_id or None,
        item_id=e.item_id or None,
        audio_ms=e.audio_ms,
        overlap_ms=e.overlap_ms,
        transcript=e.transcript,
        input_item_id=e.input_item_id or None,
    )


# Contract event (oneof name) → its Realtime events, for every event that needs no state.
STATELESS: dict[str, Callable[[Any], list[Event]]] = {
    "session_updated": lambda e: _one("session.updated", session=session_json(e.session)),
    "session_replaced": lambda e: _one(
        "session.replaced",
        session_id=e.session_id,
        attachment_generation=e.attachment_generation,
    ),
    "resync_required": lambda e: _one(
        "session.resync_required",
        session_id=e.session_id,
        reason=_RESYNC.get(e.reason, "journal_gap"),
    ),
    "session_expired": lambda e: _one(
        "session.expired", session_id=e.session_id, reason=_EXPIRY.get(e.reason, "expired")
    ),
    "session_closed": lambda e: _one("session.closed", session_id=e.session_id, reason=e.reason),
    "heartbeat_ack": lambda e: _one("session.heartbeat_ack", session_id=e.session_id),
    "going_away": lambda e: _one(
        "session.going_away", time_left_ms=e.time_left.ToMilliseconds(), reason=e.reason
    ),
    "session_queued": lambda e: _one(
        "session.queued",
        session_id=e.session_id,
        resume_token=e.resume_token,
        position=e.position,
        estimated_wait_ms=e.estimated_wait.ToMilliseconds(),
        priority_class=e.priority_class,
    ),
    # OpenAI counts input audio in whole milliseconds.
    "speech_started": lambda e: _one(
        "input_audio_buffer.speech_started",
        audio_start_ms=round(e.audio_start_ms),
        item_id=e.item_id,
    ),
    "speech_stopped": lambda e: _one(
        "input_audio_buffer.speech_stopped", audio_end_ms=round(e.audio_end_ms), item_id=e.item_id
    ),
    "input_cleared": lambda e: _one("input_audio_buffer.cleared"),
    # Words of a turn still being spoken, so before its conversation.item.added: the item_id is
    # the one input_audio_buffer.speech_started announced, which the item takes at commit.
    "input_transcription_delta": lambda e: _one(
        "conversation.item.input_audio_transcription.delta",
        item_id=e.item_id,
        content_index=e.content_index,
        delta=e.delta,
        **logprobs_json(e.logprobs),
    ),
    "input_transcription_failed": lambda e: _one(
        "conversation.item.input_audio_transcription.failed",
        item_id=e.item_id,
        content_index=e.content_index,
        error={
            "type": _ERROR_TYPES.get(e.error.type, "server_error"),
            "code": e.error.code,
            "message": e.error.message,
            "param": e.error.param or None,
        },
    ),
    "item_retrieved": lambda e: _one("conversation.item.retrieved", item=item_json(e.item)),
    "item_deleted": lambda e: _one("conversation.item.deleted", item_id=e.item_id),
    "item_truncated": lambda e: _one(
        "conversation.item.truncated",
        item_id=e.item_id,
        content_index=e.content_index,
        audio_end_ms=round(e.audio_end_ms),
    ),
    "response_speak": lambda e: _one(
        "response.speak", response_id=e.response_id, item_id=e.item_id
    ),
    "playback_acknowledged": lambda e: _one(
        "playback.acknowledged",
        response_id=e.response_id,
        item_id=e.item_id,
        played_ms=e.played_ms,
        committed_ms=e.committed_ms,
        truncate=e.truncate,
        history_committed=e.history_committed,
    ),
    "output_audio_cleared": lambda e: _one(
        "output_audio_buffer.cleared", response_id=e.response_id
    ),
    # GA's own idle prompt; the commit and the response that follow are the service's.
    "idle_timeout_triggered": lambda e: _one(
        "input_audio_buffer.timeout_triggered",
        audio_start_ms=round(e.audio_start_ms),
        audio_end_ms=round(e.audio_end_ms),
        item_id=e.item_id,
    ),
    # The extensions' view of turn-taking: overlap.decision (pause, resume, cut and the rest)
    # and turn_end.decision, each one contract event field for field.
    "overlap_decision": _overlap_decision,
    "turn_end_decision": lambda e: _one(
        "turn_end.decision",
        item_id=e.item_id,
        audio_end_ms=round(e.audio_end_ms),
        # -1 in the contract: no words were judged in time.
        probability=e.probability if e.probability >= 0 else None,
        wait_ms=e.wait_ms,
        eagerness=EAGERNESS_NAMES.get(e.eagerness),
        transcript=e.transcript,
        decided_ms=e.decided_ms,
        # Each judge alone (absent in the contract: that judge did not judge).
        sound_probability=(e.sound_probability if e.HasField("sound_probability") else None),
        words_probability=(e.words_probability if e.HasField("words_probability") else None),
    ),
    "error": _error,
}
