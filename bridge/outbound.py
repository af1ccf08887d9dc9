"""Contract events → Realtime server events, for one websocket.

The contract is compact: a response is ``response_created``, deltas, ``response_done``. Stock
clients expect OpenAI's full sequence, so :class:`ServerDialect` expands::

    response_created → response.created, conversation.item.added,
                       response.output_item.added, response.content_part.added
    deltas           → response.output_audio.delta (split to stay far below 1 MiB),
                       response.output_audio_transcript.delta, response.output_text.delta
    response_done    → response.output_audio.done, response.output_audio_transcript.done
                       (or response.output_text.done), response.content_part.done,
                       response.output_item.done, conversation.item.done, response.done

**Numbering.** Every Realtime event that comes from journaled event ``seq`` gets the event id
``event_<session tag>_<seq>_<k>``, so a replay after a resume carries the very same ids, and
the *last* event of the group carries ``server_event_seq``: a client that resumes after the
last ``server_event_seq`` it saw misses nothing, and if it saw part of a group it gets that
group again with ids it can drop. Events outside the journal get random ids and no seq.

**State.** An expansion depends on its event alone wherever the contract allows, so a bridge
that never saw the start of a response (a resume through a fresh bridge) still renders its
rest. The little state kept (which responses are open, their text so far, how long committed
input was) is bounded and only fills in what an event does not carry itself.
"""

from __future__ import annotations

import binascii
import collections
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bridge.session_json import MODALITY_NAMES, capabilities_json, session_json
from omni_grpc.pb import pb

Event = dict[str, Any]

# Raw audio bytes per outbound delta: 2 s of 24 kHz pcm16, 128 KB of base64, well under the
# 1 MiB frame cap of older SDKs.
MAX_AUDIO_DELTA_BYTES = 96_000
_OPEN_RESPONSES_KEPT = 16
_INPUT_ITEMS_KEPT = 64

ERROR_TYPES = {
    pb.ERROR_TYPE_INVALID_REQUEST: "invalid_request_error",
    pb.ERROR_TYPE_RATE_LIMIT: "rate_limit_error",
    pb.ERROR_TYPE_SERVER: "server_error",
}
_ROLE_NAMES = {
    pb.ITEM_ROLE_USER: "user",
    pb.ITEM_ROLE_ASSISTANT: "assistant",
    pb.ITEM_ROLE_SYSTEM: "system",
}
_ITEM_STATUS = {
    pb.ITEM_STATUS_IN_PROGRESS: "in_progress",
    pb.ITEM_STATUS_COMPLETED: "completed",
    pb.ITEM_STATUS_INCOMPLETE: "incomplete",
}
_RESPONSE_STATUS = {
    pb.RESPONSE_STATUS_IN_PROGRESS: "in_progress",
    pb.RESPONSE_STATUS_COMPLETED: "completed",
    pb.RESPONSE_STATUS_CANCELLED: "cancelled",
    pb.RESPONSE_STATUS_FAILED: "failed",
    pb.RESPONSE_STATUS_INCOMPLETE: "incomplete",
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
_OVERLAP_POLICY = {
    pb.OVERLAP_POLICY_LISTEN_ONLY: "listen_only",
    pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH: "barge_in_on_speech",
}
_OVERLAP_ACTION = {
    pb.OVERLAP_ACTION_DROP: "drop",
    pb.OVERLAP_ACTION_LISTEN: "listen",
    pb.OVERLAP_ACTION_BARGE_IN: "barge_in",
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


def _ms(value: float) -> int:
    return round(value)


def item_json(item: pb.ConversationItem) -> Event:
    """Renders a conversation item as a Realtime ``message`` item."""
    content: list[Event] = []
    for part in item.content:
        if part.type == pb.CONTENT_TYPE_INPUT_TEXT:
            content.append({"type": "input_text", "text": part.text})
        elif part.type == pb.CONTENT_TYPE_INPUT_AUDIO:
            content.append({"type": "input_audio", "transcript": part.transcript or None})
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
    if item.status in _ITEM_STATUS:
        out["status"] = _ITEM_STATUS[item.status]
    return out


@dataclass(slots=True)
class _Response:
    """What an open response's later events need and their own fields do not carry."""

    item_id: str
    audio: bool
    transcript: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)


class ServerDialect:
    """Expands the contract events of one session's stream into Realtime events."""

    def __init__(self, *, max_audio_delta_bytes: int = MAX_AUDIO_DELTA_BYTES) -> None:
        self.session_id = ""
        self._tag = ""
        # Whole samples of every encoding (at most 4 bytes each) in every split delta.
        self._max_audio = max(4, max_audio_delta_bytes - max_audio_delta_bytes % 4)
        self._open: collections.OrderedDict[str, _Response] = collections.OrderedDict()
        self._announced: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._input_ms: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._handlers: dict[str, Callable[[Any], list[Event]]] = {
            "session_created": self._session_created,
            "session_updated": lambda e: [
                {"type": "session.updated", "session": session_json(e.session)}
            ],
            "session_resumed": self._session_resumed,
            "session_replaced": lambda e: [
                {
                    "type": "session.replaced",
                    "session_id": e.session_id,
                    "attachment_generation": e.attachment_generation,
                }
            ],
            "resync_required": lambda e: [
                {
                    "type": "session.resync_required",
                    "session_id": e.session_id,
                    "reason": _RESYNC.get(e.reason, "journal_gap"),
                }
            ],
            "session_expired": lambda e: [
                {
                    "type": "session.expired",
                    "session_id": e.session_id,
                    "reason": _EXPIRY.get(e.reason, "expired"),
                }
            ],
            "session_closed": lambda e: [
                {"type": "session.closed", "session_id": e.session_id, "reason": e.reason}
            ],
            "heartbeat_ack": lambda e: [
                {"type": "session.heartbeat_ack", "session_id": e.session_id}
            ],
            "going_away": lambda e: [
                {
                    "type": "session.going_away",
                    "time_left_ms": e.time_left.ToMilliseconds(),
                    "reason": e.reason,
                }
            ],
            "speech_started": lambda e: [
                {
                    "type": "input_audio_buffer.speech_started",
                    "audio_start_ms": _ms(e.audio_start_ms),
                    "item_id": e.item_id,
                }
            ],
            "speech_stopped": lambda e: [
                {
                    "type": "input_audio_buffer.speech_stopped",
                    "audio_end_ms": _ms(e.audio_end_ms),
                    "item_id": e.item_id,
                }
            ],
            "input_committed": self._input_committed,
            "input_cleared": lambda e: [{"type": "input_audio_buffer.cleared"}],
            "item_added": lambda e: self._item("conversation.item.added", e),
            "item_done": lambda e: self._item("conversation.item.done", e),
            "item_retrieved": lambda e: [
                {"type": "conversation.item.retrieved", "item": item_json(e.item)}
            ],
            "item_deleted": lambda e: [{"type": "conversation.item.deleted", "item_id": e.item_id}],
            "item_truncated": lambda e: [
                {
                    "type": "conversation.item.truncated",
                    "item_id": e.item_id,
                    "content_index": e.content_index,
                    "audio_end_ms": _ms(e.audio_end_ms),
                }
            ],
            "input_transcription": self._input_transcription,
            "response_created": self._response_created,
            "output_audio_delta": self._audio_delta,
            "output_audio_transcript_delta": self._transcript_delta,
            "output_text_delta": self._text_delta,
            "response_done": lambda e: self._response_done(e.response),
            "response_listen": self._response_listen,
            "response_speak": lambda e: [
                {"type": "response.speak", "response_id": e.response_id, "item_id": e.item_id}
            ],
            "playback_acknowledged": self._playback_acknowledged,
            "output_audio_cleared": lambda e: [
                {"type": "output_audio_buffer.cleared", "response_id": e.response_id}
            ],
            "overlap_decision": lambda e: [
                {
                    "type": "overlap.decision",
                    "policy": _OVERLAP_POLICY.get(e.policy),
                    "action": _OVERLAP_ACTION.get(e.action),
                    "reason": e.reason,
                }
            ],
            "error": self._error,
        }

    def expand(self, event: pb.ConverseResponse) -> list[Event]:
        """Returns the Realtime events for one contract event, ids and seq stamped."""
        kind = event.WhichOneof("event")
        if kind is None:
            return []  # an event this bridge does not know yet: nothing to render
        out = self._handlers[kind](getattr(event, kind))
        if event.seq and out:
            prefix = f"event_{self._tag}_{event.seq}_"
            for index, item in enumerate(out):
                item["event_id"] = f"{prefix}{index}"
            out[-1]["server_event_seq"] = event.seq
        else:
            for item in out:
                item["event_id"] = random_event_id()
        return out

    # -- session -------------------------------------------------------------------------

    def _bind(self, session_id: str) -> None:
        self.session_id = session_id
        self._tag = hashlib.blake2b(session_id.encode(), digest_size=6).hexdigest()

    def _session_created(self, e: pb.SessionCreated) -> list[Event]:
        self._bind(e.session.id)
        return [
            {
                "type": "session.created",
                "session": session_json(e.session),
                "resume_token": e.resume_token,
                "attachment_generation": e.attachment_generation,
                "capabilities": capabilities_json(e.capabilities),
            }
        ]

    def _session_resumed(self, e: pb.SessionResumed) -> list[Event]:
        self._bind(e.session.id)
        return [
            {
                "type": "session.resumed",
                "session_id": e.session.id,
                "session": session_json(e.session),
                "resume_token": e.resume_token,
                "attachment_generation": e.attachment_generation,
                "replayed_events": e.replayed_events,
            }
        ]

    def _error(self, e: pb.Error) -> list[Event]:
        body: Event = {
            "type": ERROR_TYPES.get(e.type, "invalid_request_error"),
            "code": e.code,
            "message": e.message,
            "param": e.param or None,
            "event_id": e.event_id or None,
        }
        if e.retryable:
            body["retryable"] = True
            body["retry_after_ms"] = e.retry_after.ToMilliseconds()
        return [{"type": "error", "error": body}]

    # -- input ---------------------------------------------------------------------------

    def _input_committed(self, e: pb.InputCommitted) -> list[Event]:
        self._input_ms[e.item_id] = e.audio_duration_ms
        if len(self._input_ms) > _INPUT_ITEMS_KEPT:
            self._input_ms.popitem(last=False)
        return [
            {
                "type": "input_audio_buffer.committed",
                "item_id": e.item_id,
                "previous_item_id": e.previous_item_id or None,
            }
        ]

    def _input_transcription(self, e: pb.InputTranscription) -> list[Event]:
        seconds = self._input_ms.get(e.item_id, 0.0) / 1000
        return [
            {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": e.item_id,
                "content_index": e.content_index,
                "transcript": e.transcript,
                "usage": {"type": "duration", "seconds": seconds},
            }
        ]

    def _item(self, kind: str, e: pb.ItemAdded | pb.ItemDone) -> list[Event]:
        if e.item.id in self._announced:
            return []  # the response expansion already announced this assistant item
        return [
            {
                "type": kind,
                "item": item_json(e.item),
                "previous_item_id": e.previous_item_id or None,
            }
        ]

    # -- responses -----------------------------------------------------------------------

    def _state(self, response: pb.Response, item_id: str) -> _Response:
        state = self._open.get(response.id)
        if state is None:
            modalities = set(response.output_modalities) or {pb.MODALITY_AUDIO}
            state = _Response(item_id=item_id, audio=pb.MODALITY_AUDIO in modalities)
        return state

    def _response_created(self, e: pb.ResponseCreated) -> list[Event]:
        response, item_id = e.response, e.item_id
        state = self._state(response, item_id)
        self._open[response.id] = state
        self._announced[item_id] = None
        for book in (self._open, self._announced):
            if len(book) > _OPEN_RESPONSES_KEPT:
                book.popitem(last=False)
        rid = response.id
        item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        part = {"type": "audio", "transcript": ""} if state.audio else {"type": "text", "text": ""}
        return [
            {"type": "response.created", "response": self._response_json(response, [])},
            {"type": "conversation.item.added", "item": item, "previous_item_id": None},
            {
                "type": "response.output_item.added",
                "response_id": rid,
                "output_index": 0,
                "item": item,
            },
            {
                "type": "response.content_part.added",
                "response_id": rid,
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
                "part": part,
            },
        ]

    def _audio_delta(self, e: pb.OutputAudioDelta) -> list[Event]:
        audio, step = e.audio, self._max_audio
        ms_per_byte = e.duration_ms / len(audio) if audio else 0.0
        out = []
        for start in range(0, max(len(audio), 1), step):
            chunk = audio[start : start + step]
            out.append(
                {
                    "type": "response.output_audio.delta",
                    "response_id": e.response_id,
                    "item_id": e.item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": binascii.b2a_base64(chunk, newline=False).decode("ascii"),
                    "start_ms": e.start_ms + start * ms_per_byte,
                    "duration_ms": len(chunk) * ms_per_byte,
                }
            )
        return out

    def _transcript_delta(self, e: pb.OutputAudioTranscriptDelta) -> list[Event]:
        state = self._open.get(e.response_id)
        if state is not None:
            state.transcript.append(e.delta)
        return [
            {
                "type": "response.output_audio_transcript.delta",
                "response_id": e.response_id,
                "item_id": e.item_id,
                "output_index": 0,
                "content_index": 0,
                "delta": e.delta,
            }
        ]

    def _text_delta(self, e: pb.OutputTextDelta) -> list[Event]:
        state = self._open.get(e.response_id)
        if state is not None:
            state.text.append(e.delta)
        # A response with audio carries its text in the transcript; text sits after it.
        index = 1 if state is not None and state.audio else 0
        return [
            {
                "type": "response.output_text.delta",
                "response_id": e.response_id,
                "item_id": e.item_id,
                "output_index": 0,
                "content_index": index,
                "delta": e.delta,
            }
        ]

    def _response_listen(self, e: pb.ResponseListen) -> list[Event]:
        out: list[Event] = [
            {"type": "response.listen", "response_id": e.response_id or None, "reason": e.reason}
        ]
        if e.response_id in self._open:
            # The listen ends a response that was announced: close it as OpenAI clients expect.
            out.extend(
                self._response_done(
                    pb.Response(
                        id=e.response_id,
                        status=pb.RESPONSE_STATUS_COMPLETED,
                        status_reason="model_listen",
                    )
                )
            )
        return out

    def _final_item(self, response: pb.Response, state: _Response) -> Event:
        for item in response.output:
            if item.role == pb.ITEM_ROLE_ASSISTANT:
                return item_json(item)
        status = (
            "completed"
            if response.status in (pb.RESPONSE_STATUS_COMPLETED, pb.RESPONSE_STATUS_UNSPECIFIED)
            else ("incomplete")
        )
        content: list[Event] = []
        if state.audio:
            content.append({"type": "output_audio", "transcript": "".join(state.transcript)})
        if state.text or not state.audio:
            content.append({"type": "output_text", "text": "".join(state.text)})
        return {
            "id": state.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    def _response_done(self, response: pb.Response) -> list[Event]:
        first_item_id = response.output[0].id if response.output else ""
        state = self._open.pop(response.id, None) or self._state(response, first_item_id)
        item = self._final_item(response, state)
        rid, item_id = response.id, item["id"]
        ids = {"response_id": rid, "item_id": item_id, "output_index": 0}
        out: list[Event] = []
        for index, part in enumerate(item["content"]):
            if part["type"] == "output_audio":
                out.append({"type": "response.output_audio.done", **ids, "content_index": index})
                out.append(
                    {
                        "type": "response.output_audio_transcript.done",
                        **ids,
                        "content_index": index,
                        "transcript": part["transcript"],
                    }
                )
                done_part = {"type": "audio", "transcript": part["transcript"]}
            else:
                out.append(
                    {
                        "type": "response.output_text.done",
                        **ids,
                        "content_index": index,
                        "text": part["text"],
                    }
                )
                done_part = {"type": "text", "text": part["text"]}
            out.append(
                {
                    "type": "response.content_part.done",
                    **ids,
                    "content_index": index,
                    "part": done_part,
                }
            )
        out.append(
            {
                "type": "response.output_item.done",
                "response_id": rid,
                "output_index": 0,
                "item": item,
            }
        )
        out.append({"type": "conversation.item.done", "item": item, "previous_item_id": None})
        out.append({"type": "response.done", "response": self._response_json(response, [item])})
        return out

    def _response_json(self, response: pb.Response, output: list[Event]) -> Event:
        status = _RESPONSE_STATUS.get(response.status, "completed")
        out: Event = {
            "id": response.id,
            "object": "realtime.response",
            "status": status,
            "status_details": None,
            "output": output,
            "output_modalities": [
                MODALITY_NAMES[m] for m in response.output_modalities if m in MODALITY_NAMES
            ]
            or ["audio"],
            "usage": None,
        }
        if status not in ("in_progress", "completed") or response.status_reason not in ("", "stop"):
            details: Event = {"type": status}
            reason = response.status_reason
            if status == "failed":
                details["error"] = {"type": "server_error", "code": reason or None}
            elif reason in _REASONS:
                details["reason"] = _REASONS[reason]
            if reason:
                details["detail"] = reason
            out["status_details"] = details
        if response.HasField("usage"):
            usage = response.usage
            out["usage"] = {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "total_tokens": usage.input_tokens + usage.output_tokens,
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

    # -- other ---------------------------------------------------------------------------

    def _playback_acknowledged(self, e: pb.PlaybackAcknowledged) -> list[Event]:
        return [
            {
                "type": "playback.acknowledged",
                "response_id": e.response_id,
                "item_id": e.item_id,
                "played_ms": e.played_ms,
                "committed_ms": e.committed_ms,
                "truncate": e.truncate,
                "history_committed": e.history_committed,
            }
        ]
