"""The schema of the server events the bridge adds to OpenAI's Realtime dialect, for the tests.

OpenAI's SDKs hand unknown event types to the caller untouched, so these travel safely to
stock clients. Every other event the bridge sends validates against OpenAI's own
``RealtimeServerEvent`` union; the extra fields it puts on those are listed in
:data:`STANDARD_EVENT_EXTRAS` (``server_event_seq``, the resume cursor, on every one). The
models are strict and forbid unknown fields, and every event the bridge tests receive is
checked against them (``tests.bridge.testkit.check_server_event``), so the tests notice when the
bridge and this description drift apart.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Extension(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    event_id: str
    # Present on the last event rendered from a journaled event: the resume cursor.
    server_event_seq: int | None = Field(default=None, ge=1)


class SessionResumed(_Extension):
    """Confirms a resume; the missed events follow it."""

    type: Literal["session.resumed"]
    session_id: str
    session: dict[str, Any]
    resume_token: str
    attachment_generation: int = Field(ge=1)
    replayed_events: int = Field(ge=0)
    resume_secret: str | None = None  # to a socket a client or resume secret opened


class SessionQueued(_Extension):
    """The session waits for a place on a server at capacity; session.created follows."""

    type: Literal["session.queued"]
    session_id: str
    resume_token: str  # in the first one only ("" after)
    resume_secret: str | None = None  # to a socket a client or resume secret opened
    position: int = Field(ge=1)
    estimated_wait_ms: int = Field(ge=0)
    priority_class: str


class SessionReplaced(_Extension):
    """Another connection took the session over; this one closes next."""

    type: Literal["session.replaced"]
    session_id: str
    attachment_generation: int = Field(ge=1)


class SessionResyncRequired(_Extension):
    """The missed events cannot be replayed; start a new session."""

    type: Literal["session.resync_required"]
    session_id: str
    reason: Literal["journal_gap", "journal_overflow"]


class SessionExpired(_Extension):
    """The session lapsed; terminal."""

    type: Literal["session.expired"]
    session_id: str
    reason: Literal["disconnect_grace_expired", "idle_ttl_expired", "engine_failure", "expired"]


class SessionClosed(_Extension):
    """The session was closed; terminal."""

    type: Literal["session.closed"]
    session_id: str
    reason: str


class SessionHeartbeatAck(_Extension):
    """Answers ``session.heartbeat``."""

    type: Literal["session.heartbeat_ack"]
    session_id: str


class SessionGoingAway(_Extension):
    """The server stops soon; resume elsewhere."""

    type: Literal["session.going_away"]
    time_left_ms: int = Field(ge=0)
    reason: str


class ResponseListen(_Extension):
    """The engine chose to keep listening."""

    type: Literal["response.listen"]
    response_id: str | None
    reason: str


class ResponseSpeak(_Extension):
    """The engine starts to speak in a response."""

    type: Literal["response.speak"]
    response_id: str
    item_id: str


class PlaybackAcknowledged(_Extension):
    """Confirms a ``playback.ack``."""

    type: Literal["playback.acknowledged"]
    response_id: str
    item_id: str
    played_ms: float
    committed_ms: float
    truncate: bool
    history_committed: bool


class OverlapDecision(_Extension):
    """Reports how speech over the assistant was treated: the reply paused, resumed or cut."""

    type: Literal["overlap.decision"]
    policy: Literal["listen_only", "barge_in_on_speech"] | None
    action: Literal["drop", "listen", "barge_in", "pause", "resume"] | None
    reason: str
    response_id: str | None
    item_id: str | None
    audio_ms: float = Field(ge=0)
    overlap_ms: float = Field(ge=0)
    transcript: str
    input_item_id: str | None


class TurnEndDecision(_Extension):
    """One judgement of semantic turn detection at a pause in the user's speech."""

    type: Literal["turn_end.decision"]
    item_id: str
    audio_end_ms: int = Field(ge=0)
    probability: float | None = Field(ge=0, le=1)
    wait_ms: int = Field(ge=0)
    eagerness: Literal["low", "medium", "high", "auto"] | None
    transcript: str
    decided_ms: float = Field(ge=0)
    sound_probability: float | None = Field(ge=0, le=1)
    words_probability: float | None = Field(ge=0, le=1)


ExtensionEvent = Annotated[
    SessionResumed
    | SessionQueued
    | SessionReplaced
    | SessionResyncRequired
    | SessionExpired
    | SessionClosed
    | SessionHeartbeatAck
    | SessionGoingAway
    | ResponseListen
    | ResponseSpeak
    | PlaybackAcknowledged
    | OverlapDecision
    | TurnEndDecision,
    Field(discriminator="type"),
]
EXTENSION_EVENT: TypeAdapter[ExtensionEvent] = TypeAdapter(ExtensionEvent)
EXTENSION_EVENT_TYPES = frozenset(
    name
    for model in get_args(get_args(ExtensionEvent)[0])  # the union inside the Annotated
    for name in get_args(model.model_fields["type"].annotation)
)

# Fields the bridge adds to events of OpenAI's own union for a client that asked for the
# extensions, as dotted paths by event type ("*": every type). OpenAI's models allow extra
# fields, so these never break a stock client, but only extension clients get them.
_SESSION_EXTRAS = frozenset(
    f"session.{name}"
    for name in (
        "overlap_policy",
        "playback_commit_policy",
        "interruption",
        "idle_timeout_ms",
        "state",
        "turn_state",
        "epoch",
        "engine_options",
        "parallel_tool_calls",
    )
) | {"session.audio.input.turn_detection.idle_timeout_ms"}  # on semantic_vad, which GA's lacks
_RESPONSE_EXTRAS = frozenset(
    {
        "response.latency",
        "response.status_details.detail",
        "response.usage.input_audio_ms",
        "response.usage.output_audio_ms",
    }
)
STANDARD_EVENT_EXTRAS: dict[str, frozenset[str]] = {
    "*": frozenset({"server_event_seq"}),
    "session.created": frozenset(
        {"resume_token", "attachment_generation", "capabilities", "resume_secret"}
    )
    | _SESSION_EXTRAS,
    "session.updated": _SESSION_EXTRAS,
    "response.created": _RESPONSE_EXTRAS,
    "response.done": _RESPONSE_EXTRAS,
    "response.output_audio.delta": frozenset({"start_ms", "duration_ms"}),
    "error": frozenset({"error.retryable", "error.retry_after_ms"}),
}
# The only extra fields every client gets: a format at a rate other than GA's 24 kHz says its
# rate in sample_rate_hz (GA's `rate` may only be 24000), float PCM says so in `encoding`.
_FORMAT_EXTRAS = frozenset(
    f"session.audio.{direction}.format.{name}"
    for direction in ("input", "output")
    for name in ("sample_rate_hz", "encoding")
)
# The session's `id` and `object` are not in the SDK's session type, but OpenAI's server sends
# them (the agents SDKs read the id), so every client gets them too.
_SESSION_IDENTITY = frozenset({"session.id", "session.object"})
PLAIN_EVENT_EXTRAS: dict[str, frozenset[str]] = {
    "session.created": _FORMAT_EXTRAS | _SESSION_IDENTITY,
    "session.updated": _FORMAT_EXTRAS | _SESSION_IDENTITY,
}
