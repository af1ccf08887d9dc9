"""Outbound, vLLM-Omni dialect: contract events → the server events of vLLM-Omni's endpoint.

:class:`VllmOmniOutbound` renders what :class:`bridge.realtime.outbound.RealtimeOutbound`
renders, in the shapes vLLM-Omni's own serving gives them, where its clients read them:

* the ``session`` object also carries the reference's fields: ``capabilities`` (under the
  reference's names: ``supports_session_resume``, ``chunk_period_ms`` …), the beta format
  names with ``sample_rate_hz``, ``modalities``, ``idle_timeout_s``, ``overlap_barge_in_ms``,
  ``extra_body`` and ``ref_audio``, and the reference's ``state`` (open or closed);
* a session opened by ``session.update`` is announced by ``session.created`` and then
  ``session.updated``, as the reference answers every accepted update;
* ``response.created`` names its ``response_id`` at the top level;
* audio deltas say their ``format``, ``sample_rate_hz`` and, in ``metadata``, the response's
  ``audio_duration_ms`` so far;
* ``response.listen`` and ``playback.acknowledged`` are nested as the reference nests them.
"""

from __future__ import annotations

import collections
from typing import Any

from google.protobuf import json_format

from bridge.dialect import Event
from bridge.options import MAX_AUDIO_DELTA_BYTES
from bridge.realtime.outbound import RealtimeOutbound
from bridge.realtime.server_events import rate_limits_now
from bridge.realtime.session_config import ENCODINGS
from bridge.realtime.session_json import MODALITY_NAMES, session_json
from bridge.vllm_omni.numbering import number
from omni_grpc.wire import pb

# The reference's (beta) name of each encoding.
FORMAT_NAMES = {
    pb.AUDIO_ENCODING_PCM16: "pcm16",
    pb.AUDIO_ENCODING_PCM_F32: "pcm_f32le",
    pb.AUDIO_ENCODING_G711_ULAW: "g711_ulaw",
    pb.AUDIO_ENCODING_G711_ALAW: "g711_alaw",
}
assert all(ENCODINGS[name] == value for value, name in FORMAT_NAMES.items())
_PCM = frozenset({pb.AUDIO_ENCODING_PCM16, pb.AUDIO_ENCODING_PCM_F32})
_ITEMS_KEPT = 64
# The chunk period of an engine that takes input of any length (the contract's 0). The reference
# has no word for "any": its client reads a positive whole number of milliseconds and takes
# anything else, null among it, for 1000. Every whole millisecond of input is a whole number of
# 1 ms units, the finest the field can say.
ANY_LENGTH_PERIOD_MS = 1
# The reference's session states: a session lives "open" until it is closed, attached or not.
_STATES = {
    pb.SESSION_STATE_ATTACHED: "open",
    pb.SESSION_STATE_DETACHED: "open",
    pb.SESSION_STATE_CLOSED: "closed",
    pb.SESSION_STATE_EXPIRED: "closed",
}

# The contract's reasons a response ended, where the reference's name differs.
_STATUS_REASONS = {"output_audio_cleared": "output_audio_buffer_clear"}
# The reference's reasons for an expiry: an engine that failed is its "request_cleanup".
_EXPIRY_REASONS = {
    pb.EXPIRY_REASON_DISCONNECT_GRACE: "disconnect_grace_expired",
    pb.EXPIRY_REASON_IDLE_TIMEOUT: "idle_ttl_expired",
    pb.EXPIRY_REASON_ENGINE_FAILURE: "request_cleanup",
}


def capabilities_json(caps: pb.Capabilities) -> dict[str, Any]:
    """The handshake under the reference's names, with our other limits beside them."""
    return {
        "supports_session_resume": caps.supports_resume,
        "supports_barge_in": caps.supports_barge_in,
        "supports_playback_ack": caps.supports_playback_ack,
        "supports_client_commit": True,
        "supports_input_append": True,
        "supports_realtime_endpoint": True,
        "supports_multi_session": caps.max_sessions > 1,
        "input_modes": ["append_audio_chunk"],
        "required_input_modalities": ["audio"],
        "chunk_period_ms": caps.chunk_period_ms or ANY_LENGTH_PERIOD_MS,
        # Ours, which the reference has no name for.
        "engine": caps.engine,
        "protocol_version": caps.protocol_version,
        "supports_server_vad": caps.supports_server_vad,
        "max_sessions": caps.max_sessions,
        "max_pending_input_bytes": caps.max_pending_input_bytes,
        "journal_window_ms": caps.journal_window.ToMilliseconds(),
        "disconnect_grace_ms": caps.disconnect_grace.ToMilliseconds(),
    }


def vllm_omni_session_json(
    session: pb.Session, capabilities: pb.Capabilities | None
) -> dict[str, Any]:
    """The session object as the reference renders it (the GA shape is kept beside it)."""
    config = session.config
    out = session_json(session)
    options = json_format.MessageToDict(config.engine_options)
    ref_audio = options.pop("ref_audio", None)
    model_options = options.pop("extra_body", {})
    # The reference has one bag of model options: vLLM-Omni's, over any others.
    extra_body = {**options, **(model_options if isinstance(model_options, dict) else {})}
    out.pop("engine_options", None)
    in_fmt, out_fmt = config.input_audio_format, config.output_audio_format
    out.update(
        {
            "state": _STATES.get(session.state, "open"),
            "modalities": [
                MODALITY_NAMES[m] for m in config.output_modalities if m in MODALITY_NAMES
            ],
            "input_audio_format": FORMAT_NAMES.get(in_fmt.encoding, "pcm16"),
            "output_audio_format": FORMAT_NAMES.get(out_fmt.encoding, "pcm16"),
            "sample_rate_hz": in_fmt.sample_rate_hz,
            "idle_timeout_s": config.idle_timeout.ToMilliseconds() / 1000,
            # The reference's name for how long overlap speech must last to cut the reply.
            "overlap_barge_in_ms": config.interruption.min_duration_ms,
            "extra_body": extra_body,
            "ref_audio": ref_audio if isinstance(ref_audio, str) else None,
        }
    )
    for side, fmt in (("input", in_fmt), ("output", out_fmt)):
        block = out["audio"][side]
        block["sample_rate_hz"] = fmt.sample_rate_hz
        if fmt.encoding in _PCM:
            # The reference's format object names the true rate (GA's names only 24000).
            block["format"] = {"type": block["format"]["type"], "rate": fmt.sample_rate_hz}
    if capabilities is not None:
        out["capabilities"] = capabilities_json(capabilities)
    return out


class VllmOmniOutbound(RealtimeOutbound):
    """Expands contract events into the events of vLLM-Omni's endpoint."""

    def __init__(self, *, max_audio_delta_bytes: int = MAX_AUDIO_DELTA_BYTES) -> None:
        super().__init__(max_audio_delta_bytes=max_audio_delta_bytes)
        self.extensions = True  # the extension events and fields are this dialect's own
        # Set when the connection opened with a session.update, which session.updated answers.
        self.opened_by_update = False
        self._capabilities: pb.Capabilities | None = None  # kept for every later session object
        # The item ids of the responses announced lately, which a playback ack may name.
        self._items: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._handlers.update(
            {
                "session_created": self._session_created_vllm_omni,
                "session_resumed": self._session_resumed_vllm_omni,
                "session_updated": self._session_updated,
                "response_created": self._response_created_vllm_omni,
                "output_audio_delta": self._audio_delta_vllm_omni,
                "response_listen": self._response_listen_vllm_omni,
                "playback_acknowledged": self._playback_acknowledged,
                "response_done": self._response_done_vllm_omni,
                "session_expired": self._session_expired,
            }
        )
        # The reference sends no partial transcripts: its clients would not know the event.
        del self._handlers["input_transcription_delta"]

    def expand(self, event: pb.ConverseResponse) -> list[Event]:
        """As the OpenAI dialect expands, with ``conversation.item.created`` after every
        ``conversation.item.added`` (the reference sends both spellings), and every event
        numbered as the reference numbers them (:mod:`bridge.vllm_omni.numbering`)."""
        out: list[Event] = []
        for rendered in super().expand(event):
            rendered.pop("server_event_seq", None)  # OpenAI's numbering: the group's last only
            out.append(rendered)
            if rendered["type"] == "conversation.item.added":
                twin_id = f"{rendered['event_id']}_created"
                out.append({**rendered, "type": "conversation.item.created", "event_id": twin_id})
        number(out, event.seq)
        return out

    def _session(self, session: pb.Session) -> dict[str, Any]:
        return vllm_omni_session_json(session, self._capabilities)

    def _session_created_vllm_omni(self, e: pb.SessionCreated) -> list[Event]:
        self._capabilities = e.capabilities
        (created,) = self._session_created(e)
        created.pop("capabilities", None)  # inside the session object here
        created["session"] = self._session(e.session)
        out = [created]
        if self.opened_by_update:
            out.append({"type": "session.updated", "session": created["session"]})
        return out

    def _session_resumed_vllm_omni(self, e: pb.SessionResumed) -> list[Event]:
        (resumed,) = self._session_resumed(e)
        resumed["session"] = self._session(e.session)
        return [resumed]

    def _session_updated(self, e: pb.SessionUpdated) -> list[Event]:
        return [{"type": "session.updated", "session": self._session(e.session)}]

    def knows_item(self, item_id: str) -> bool:
        """Whether ``item_id`` is the item of a response this connection announced."""
        return item_id in self._items

    def _response_created_vllm_omni(self, e: pb.ResponseCreated) -> list[Event]:
        self._items[e.item_id] = None
        if len(self._items) > _ITEMS_KEPT:
            self._items.popitem(last=False)
        out = self._response_created(e)
        out[0]["response_id"] = e.response.id
        return out

    def _audio_delta_vllm_omni(self, e: pb.OutputAudioDelta) -> list[Event]:
        out = self._audio_delta(e)
        for delta in out:
            delta["format"] = FORMAT_NAMES.get(e.encoding, "pcm16")
            delta["sample_rate_hz"] = e.sample_rate_hz
            delta["metadata"] = {
                "session_id": self.session_id,
                # The response's audio so far, through this delta, as the reference counts it.
                "audio_duration_ms": delta["start_ms"] + delta["duration_ms"],
            }
        return out

    def _response_listen_vllm_omni(self, e: pb.ResponseListen) -> list[Event]:
        out = self._response_listen(e)
        response: Event = {
            "object": "realtime.response",
            "status": "listening",
            "metadata": {
                "type": "response.listen",
                "session_id": self.session_id,
                "reason": e.reason,
                "model_listen": e.reason == "model_listen",
            },
        }
        listen: Event = {"type": "response.listen", "session_id": self.session_id}
        if e.response_id:
            # Only a listen that ends a response names it; the reference client closes that
            # response's handle on it, and takes an unnamed listen as a decision of its own.
            listen["response_id"] = e.response_id
            response["id"] = e.response_id
        listen["response"] = response
        out[0] = listen
        return out

    def _response_done_vllm_omni(self, e: pb.ResponseDone) -> list[Event]:
        out = self._response_done(e.response)
        done = out[-1]
        done["response_id"] = e.response.id
        details = done["response"].get("status_details")
        reason = e.response.status_reason
        if details is not None and reason:
            # The reference's reason as it is, not OpenAI's nearest (barge_in, not
            # turn_detected).
            details["reason"] = _STATUS_REASONS.get(reason, reason)
        # The reference follows every response.done with rate_limits.updated (its list empty:
        # it has no limits); here with the limits the service read as the response ended.
        return [*out, rate_limits_now(e.rate_limits)]

    def _session_expired(self, e: pb.SessionExpired) -> list[Event]:
        return [
            {
                "type": "session.expired",
                "session_id": e.session_id,
                "reason": _EXPIRY_REASONS.get(e.reason, "idle_ttl_expired"),
            }
        ]

    def _playback_acknowledged(self, e: pb.PlaybackAcknowledged) -> list[Event]:
        return [
            {
                "type": "playback.acknowledged",
                "event": {
                    "type": "playback.acknowledged",
                    "session_id": self.session_id,
                    "response_id": e.response_id,
                    "item_id": e.item_id,
                    "played_ms": e.played_ms,
                    "committed_ms": e.committed_ms,
                    "truncate": e.truncate,
                    "history_committed": e.history_committed,
                },
            }
        ]
