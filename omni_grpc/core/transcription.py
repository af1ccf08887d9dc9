"""Transcription: the session's type, and what its transcripts are made with.

The rules held here (one place, for every engine):

* **A session's type.** ``SESSION_TYPE_UNSPECIFIED`` on open is a realtime session. An update
  may change it, as OpenAI's clients do (they open a session, then make it a transcription
  session with ``session.update``); back to realtime, turn detection creates and interrupts
  responses again unless the update says otherwise (:func:`change_type`).
* **A transcription session has no responses.** It always transcribes, its turn detection
  neither creates nor interrupts responses, and it has no idle prompts (a prompt is a response);
  ``create_response``, and a commit that asks for one, are refused with
  ``responses_unsupported`` (:func:`check_no_response`).
* **Transcription is on unless turned off.** Unset on open, a session transcribes (what every
  engine did before it could be turned off); set with ``enabled`` false, it does not, and the
  session's transcript events are dropped here whatever the engine sends (:func:`shown`).
* **The model is one the engine has.** Empty is the engine's default, written into the
  configuration in force; any other name not in ``EngineFeatures.transcription_models`` is
  refused with ``unknown_transcription_model``. Logprobs are asked only of an engine that has
  them (``unsupported_transcription_logprobs``); a language is an ISO-639 code; a prompt is
  bounded.
"""

from __future__ import annotations

import re

from omni_grpc.core.errors import CommandError
from omni_grpc.core.limits import EngineFeatures
from omni_grpc.wire import pb

MAX_PROMPT_CHARS = 4096
_LANGUAGE = re.compile(r"[a-z]{2,3}")
TRANSCRIPTION = pb.SESSION_TYPE_TRANSCRIPTION
# The events that carry a session's transcripts of its user turns.
TRANSCRIPT_EVENTS = frozenset(
    {"input_transcription", "input_transcription_delta", "input_transcription_failed"}
)


def resolve_transcription(config: pb.SessionConfig, engine: EngineFeatures) -> None:
    """Fills the session's type and transcription settings in ``config``, or raises
    CommandError (after turn detection is resolved: a transcription session overrides it)."""
    if config.type == pb.SESSION_TYPE_UNSPECIFIED:
        config.type = pb.SESSION_TYPE_REALTIME
    if config.type not in (pb.SESSION_TYPE_REALTIME, TRANSCRIPTION):
        raise CommandError("invalid_session_config", "unknown session type", param="type")
    tr = config.input_transcription
    if not config.HasField("input_transcription") or config.type == TRANSCRIPTION:
        tr.enabled = True
    models = engine.transcription_models
    if not tr.model:
        tr.model = models[0] if models else ""
    elif tr.model not in models:
        have = ", ".join(models) or "none"
        raise CommandError(
            "unknown_transcription_model",
            f"unknown transcription model {tr.model!r}; this engine has: {have}",
            param="input_transcription.model",
        )
    if tr.language and not _LANGUAGE.fullmatch(tr.language):
        raise CommandError(
            "invalid_session_config",
            "language must be an ISO-639-1 code such as 'en'",
            param="input_transcription.language",
        )
    if len(tr.prompt) > MAX_PROMPT_CHARS:
        raise CommandError(
            "invalid_session_config",
            f"a transcription prompt has at most {MAX_PROMPT_CHARS} characters",
            param="input_transcription.prompt",
        )
    if not config.HasField("transcription_logprobs"):
        config.transcription_logprobs = False
    elif config.transcription_logprobs and not engine.supports_transcription_logprobs:
        raise CommandError(
            "unsupported_transcription_logprobs",
            "this engine gives no log-probabilities of its transcripts",
            param="transcription_logprobs",
        )
    if config.type == TRANSCRIPTION:
        td = config.turn_detection
        if td.idle_timeout_ms:
            raise CommandError(
                "responses_unsupported",
                "a transcription session has no responses, so no idle prompts",
                param="turn_detection.idle_timeout_ms",
            )
        td.create_response = False
        td.interrupt_response = False


def change_type(merged: pb.SessionConfig, patch: pb.SessionConfig) -> None:
    """Before ``patch`` is laid over ``merged`` (the configuration in force): a session that
    stops being a transcription session gets turn detection's response defaults back."""
    leaving = merged.type == TRANSCRIPTION and patch.type not in (0, TRANSCRIPTION)
    if leaving:
        merged.turn_detection.ClearField("create_response")
        merged.turn_detection.ClearField("interrupt_response")


def check_no_response(kind: str, request: pb.ConverseRequest, config: pb.SessionConfig) -> None:
    """Refuses a command that asks a transcription session for a response."""
    if config.type != TRANSCRIPTION:
        return
    if kind == "create_response" or (
        kind == "commit_input_audio" and request.commit_input_audio.create_response
    ):
        raise CommandError(
            "responses_unsupported",
            "a transcription session transcribes and never responds",
            param="create_response" if kind == "commit_input_audio" else "",
        )


def shown(kind: str | None, config: pb.SessionConfig) -> bool:
    """Whether an engine's event of ``kind`` reaches the client: transcript events only where
    transcription is on."""
    return kind not in TRANSCRIPT_EVENTS or config.input_transcription.enabled
