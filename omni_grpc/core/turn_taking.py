"""Turn-taking settings: turn detection and interruptions, resolved against the engine.

Part of :func:`omni_grpc.core.config.resolve_config`: each function fills the defaults of one
block of ``SessionConfig`` and refuses what the engine cannot do, so that an engine only ever
sees a complete configuration it can honour.

* Turn detection (``TurnDetection``): who ends a turn. ``SEMANTIC_VAD`` with an eagerness is
  served as such by an engine that judges words (``supports_semantic_vad``); elsewhere it
  becomes the engine's voice activity detector with the eagerness's silence, the stand-in that
  served it before engines judged words, or client commits where there is no detector.
  Without an eagerness it is that stand-in everywhere, with the client's own silence: what the
  type meant to the clients written before eagerness existed (the websocket bridge among them,
  until it passes OpenAI's eagerness on).
* Interruptions (``InterruptionConfig``): what speech over a reply must be to end it. The
  defaults are OpenAI's behaviour (any speech, at once); anything else needs an engine that
  hears speech itself (server VAD), and interruption by words one that hears words.
"""

from __future__ import annotations

from omni_grpc.core.errors import CommandError
from omni_grpc.core.limits import EngineFeatures
from omni_grpc.wire import pb

# The silence that stands in for semantic turn detection where the engine cannot judge words:
# OpenAI's "low" lets the user take their time, "high" answers as soon as it can.
EAGERNESS_SILENCE_MS = {
    pb.EAGERNESS_LOW: 1000,
    pb.EAGERNESS_MEDIUM: 500,
    pb.EAGERNESS_AUTO: 500,
    pb.EAGERNESS_HIGH: 300,
}
MAX_IDLE_TIMEOUT_MS = 3_600_000
MAX_INTERRUPTION_MS = 10_000
MAX_MIN_WORDS = 20
DEFAULT_FALSE_INTERRUPTION_TIMEOUT_MS = 2000  # LiveKit's false_interruption_timeout


def _resolve_type(td: pb.TurnDetection, engine: EngineFeatures) -> None:
    if td.type == pb.TURN_DETECTION_TYPE_SEMANTIC_VAD:
        if td.eagerness != pb.EAGERNESS_UNSPECIFIED and engine.supports_semantic_vad:
            return
        if td.eagerness != pb.EAGERNESS_UNSPECIFIED:
            td.silence_duration_ms = EAGERNESS_SILENCE_MS[td.eagerness]
        # The stand-in: the engine's detector, or the client commits where it has none
        # (clients that default to semantic VAD, such as OpenAI's agents SDKs, would otherwise
        # lose their whole update).
        td.type = pb.TURN_DETECTION_TYPE_UNSPECIFIED
    if td.type == pb.TURN_DETECTION_TYPE_UNSPECIFIED:
        td.type = (
            pb.TURN_DETECTION_TYPE_SERVER_VAD
            if engine.supports_server_vad
            else pb.TURN_DETECTION_TYPE_NONE
        )
    if td.type == pb.TURN_DETECTION_TYPE_SERVER_VAD and not engine.supports_server_vad:
        raise CommandError(
            "unsupported_turn_detection", "this engine has no server VAD", param="turn_detection"
        )


def resolve_turn_detection(config: pb.SessionConfig, engine: EngineFeatures) -> None:
    """Fills ``config.turn_detection`` in place; raises CommandError for what cannot be."""
    td = config.turn_detection
    if td.eagerness not in (pb.EAGERNESS_UNSPECIFIED, *EAGERNESS_SILENCE_MS):
        raise CommandError(
            "invalid_session_config", "unknown eagerness", param="turn_detection.eagerness"
        )
    _resolve_type(td, engine)
    if td.type != pb.TURN_DETECTION_TYPE_SEMANTIC_VAD:
        td.eagerness = pb.EAGERNESS_UNSPECIFIED  # it means something only there
    if td.threshold == 0:
        td.threshold = 0.5
    if not 0.15 < td.threshold <= 1.0:
        raise CommandError(
            "unsupported_turn_detection",
            "threshold must be in (0.15, 1]",
            param="turn_detection.threshold",
        )
    td.prefix_padding_ms = td.prefix_padding_ms or 300
    td.silence_duration_ms = td.silence_duration_ms or 500
    if not td.HasField("create_response"):
        td.create_response = True
    if not td.HasField("interrupt_response"):
        td.interrupt_response = True
    if td.idle_timeout_ms > MAX_IDLE_TIMEOUT_MS:
        raise CommandError(
            "invalid_session_config",
            f"idle_timeout_ms must be at most {MAX_IDLE_TIMEOUT_MS}",
            param="turn_detection.idle_timeout_ms",
        )
    if td.idle_timeout_ms and td.type == pb.TURN_DETECTION_TYPE_NONE:
        raise CommandError(
            "unsupported_turn_detection",
            "idle_timeout_ms needs server or semantic VAD",
            param="turn_detection.idle_timeout_ms",
        )


def resolve_interruption(config: pb.SessionConfig, engine: EngineFeatures) -> None:
    """Fills ``config.interruption`` in place; raises CommandError for what cannot be."""
    rules = config.interruption
    if rules.mode == pb.INTERRUPTION_MODE_UNSPECIFIED:
        rules.mode = pb.INTERRUPTION_MODE_SPEECH
    if rules.mode not in (pb.INTERRUPTION_MODE_SPEECH, pb.INTERRUPTION_MODE_WORDS):
        raise CommandError(
            "invalid_session_config", "unknown interruption mode", param="interruption.mode"
        )
    if not rules.HasField("min_duration_ms"):
        rules.min_duration_ms = 0
    if not rules.HasField("min_words"):
        rules.min_words = 1
    if not rules.HasField("resume_false_interruption"):
        rules.resume_false_interruption = False
    rules.false_interruption_timeout_ms = (
        rules.false_interruption_timeout_ms or DEFAULT_FALSE_INTERRUPTION_TIMEOUT_MS
    )
    for name in ("min_duration_ms", "false_interruption_timeout_ms"):
        if getattr(rules, name) > MAX_INTERRUPTION_MS:
            raise CommandError(
                "invalid_session_config",
                f"{name} must be at most {MAX_INTERRUPTION_MS}",
                param=f"interruption.{name}",
            )
    if not 1 <= rules.min_words <= MAX_MIN_WORDS:
        raise CommandError(
            "invalid_session_config",
            f"min_words must be in [1, {MAX_MIN_WORDS}]",
            param="interruption.min_words",
        )
    by_words = rules.mode == pb.INTERRUPTION_MODE_WORDS
    if by_words and not engine.supports_interruption_by_words:
        raise CommandError(
            "unsupported_interruption",
            "this engine does not hear the words of speech over a reply",
            param="interruption.mode",
        )
    beyond_default = by_words or rules.min_duration_ms or rules.resume_false_interruption
    if beyond_default and not engine.supports_server_vad:
        raise CommandError(
            "unsupported_interruption",
            "only an engine with server VAD judges speech over a reply",
            param="interruption",
        )
