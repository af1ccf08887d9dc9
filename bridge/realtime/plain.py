"""What the OpenAI dialect sends a client that did not ask for the duplex extensions.

OpenAI's agents SDKs validate every server event against the GA ``RealtimeServerEvent`` union
and turn each one they do not know into an error. So a client that did not ask for the
extensions (``?extensions=1`` on ``/v1/realtime``, or a ``session.resume``, which only an
extension client sends; the vLLM-Omni dialect of ``/v1/duplex`` always has them) gets OpenAI's
GA events and fields only: :func:`plain` drops the extension events and removes the extension
fields the bridge puts on GA events. The exceptions, fields the GA types tolerate: a format
object at a rate or encoding GA cannot name keeps ``sample_rate_hz`` and ``encoding``
(:func:`bridge.realtime.session_json.format_json`), so that the session never claims a rate that
is not in force; and the session keeps ``id`` and ``object``, which OpenAI's server sends too.
"""

from __future__ import annotations

from typing import Any

# Events of the duplex protocol that OpenAI's union lacks.
EXTENSION_EVENTS = frozenset(
    {
        "session.resumed",
        "session.replaced",
        "session.resync_required",
        "session.expired",
        "session.closed",
        "session.heartbeat_ack",
        "session.going_away",
        "session.queued",
        "response.listen",
        "response.speak",
        "playback.acknowledged",
        "overlap.decision",
        "turn_end.decision",
    }
)
# Fields of the session object beyond GA's: the duplex settings and the session's state.
_SESSION_FIELDS = (
    "overlap_policy",
    "playback_commit_policy",
    "interruption",
    "idle_timeout_ms",
    "state",
    "turn_state",
    "epoch",
    "engine_options",
    "recording",
    "parallel_tool_calls",
)
_RESPONSE_PATHS = (
    ("response", "latency"),
    ("response", "status_details", "detail"),
    ("response", "usage", "input_audio_ms"),
    ("response", "usage", "output_audio_ms"),
)
# Where the bridge puts extension fields on GA events: paths into the event, by type.
EXTENSION_FIELDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "*": (("server_event_seq",),),
    "session.created": (
        ("resume_token",),
        ("attachment_generation",),
        ("capabilities",),
        *(("session", name) for name in _SESSION_FIELDS),
    ),
    "session.updated": tuple(("session", name) for name in _SESSION_FIELDS),
    "response.created": _RESPONSE_PATHS,
    "response.done": _RESPONSE_PATHS,
    "response.output_audio.delta": (("start_ms",), ("duration_ms",)),
    "error": (("error", "retryable"), ("error", "retry_after_ms")),
}


def _remove(event: dict[str, Any], path: tuple[str, ...]) -> None:
    node: Any = event
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(path[-1], None)


def _semantic_idle_timeout(event: dict[str, Any]) -> None:
    """GA knows an idle timeout on server_vad only; the contract serves it on semantic_vad
    too, which only an extension client is shown."""
    session = event.get("session")
    audio = session.get("audio") if isinstance(session, dict) else None
    detection = audio.get("input", {}).get("turn_detection") if isinstance(audio, dict) else None
    if isinstance(detection, dict) and detection.get("type") == "semantic_vad":
        detection.pop("idle_timeout_ms", None)


def plain(event: dict[str, Any]) -> dict[str, Any] | None:
    """The event as the plain OpenAI dialect sends it, or None when it has no place there."""
    kind = event["type"]
    if kind in EXTENSION_EVENTS:
        return None
    for path in (*EXTENSION_FIELDS["*"], *EXTENSION_FIELDS.get(kind, ())):
        _remove(event, path)
    if kind in ("session.created", "session.updated"):
        _semantic_idle_timeout(event)
    return event
