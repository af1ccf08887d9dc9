"""Builders and decoders shared by the core tests.

The core speaks only in serialized ``ConverseResponse`` payloads, so every test decodes what
it got (:func:`decode`) and compares whole messages, never substrings of bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from omni_grpc.core import Effects, EngineFeatures, Limits, Registry, Session
from omni_grpc.core.commands import AppendAudio, EngineCommand, engine_command, kind_of
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT

ENGINE = EngineFeatures(name="test-engine", default_model="test-model")
VAD_ENGINE = EngineFeatures(name="vad-engine", default_model="test-model", supports_server_vad=True)
LIMITS = Limits()
TERMINAL_KINDS = frozenset({"session_closed", "session_expired"})


def decode(effects: Effects, generation: int | None = None) -> list[pb.ConverseResponse]:
    """The events of ``effects`` (only those for ``generation`` if given), decoded."""
    return [
        pb.ConverseResponse.FromString(payload)
        for target, payload in effects.sends
        if generation is None or target == generation
    ]


# A session's input format when its configuration names none.
DEFAULT_INPUT = pb.AudioFormat(encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=24000)


def requests(effects: Effects) -> list[tuple[str, EngineCommand]]:
    """The commands ``effects`` hand on to the engine, admitted, in order, each with its kind
    (values are named tuples, which compare equal across classes: the kind tells them apart)."""
    return [(kind_of(command), command) for command in effects.engine]


def handed(
    request: pb.ConverseRequest,
    fmt: pb.AudioFormat = CANONICAL_INPUT,
) -> tuple[str, EngineCommand]:
    """What the core hands the engine for ``request``: its typed value, an append's format
    resolved against the session's input format ``fmt`` (the append's own when it names one),
    native when it is the canonical input (the test engines declare no other native rate)."""
    command = engine_command(request)
    if isinstance(command, AppendAudio):
        encoding = command.encoding or fmt.encoding
        rate_hz = command.rate_hz or fmt.sample_rate_hz
        native = (encoding, rate_hz) == (CANONICAL_INPUT.encoding, CANONICAL_INPUT.sample_rate_hz)
        command = command._replace(encoding=encoding, rate_hz=rate_hz, native=native)
    return kind_of(command), command


def kinds(events: Iterable[pb.ConverseResponse]) -> list[str | None]:
    """The oneof name of each event."""
    return [event.WhichOneof("event") for event in events]


def cmd(client_seq: int, event_id: str = "", **command: Any) -> pb.ConverseRequest:
    """A command, e.g. ``cmd(3, heartbeat=pb.Heartbeat())``."""
    return pb.ConverseRequest(client_seq=client_seq, event_id=event_id, **command)


def heartbeat(client_seq: int = 0, event_id: str = "") -> pb.ConverseRequest:
    return cmd(client_seq, event_id, heartbeat=pb.Heartbeat())


def ack(seq: int, client_seq: int = 0, event_id: str = "") -> pb.ConverseRequest:
    return cmd(client_seq, event_id, ack_events=pb.AckEvents(seq=seq))


def append(client_seq: int, audio: bytes = b"\0\0", **fields: Any) -> pb.ConverseRequest:
    return cmd(client_seq, append_input_audio=pb.AppendInputAudio(audio=audio, **fields))


def text(client_seq: int, value: str = "hi", event_id: str = "") -> pb.ConverseRequest:
    return cmd(client_seq, event_id, append_input_text=pb.AppendInputText(text=value))


def close(client_seq: int, reason: str = "") -> pb.ConverseRequest:
    return cmd(client_seq, close_session=pb.CloseSession(reason=reason))


# -- engine output ----------------------------------------------------------------------


def created(response_id: str) -> pb.ConverseResponse:
    return pb.ConverseResponse(
        response_created=pb.ResponseCreated(
            response=pb.Response(id=response_id, status=pb.RESPONSE_STATUS_IN_PROGRESS)
        )
    )


def delta(response_id: str, value: str = "x") -> pb.ConverseResponse:
    return pb.ConverseResponse(
        output_text_delta=pb.OutputTextDelta(delta=value, response_id=response_id)
    )


def done(
    response_id: str, status: pb.ResponseStatus.ValueType = pb.RESPONSE_STATUS_COMPLETED
) -> pb.ConverseResponse:
    return pb.ConverseResponse(
        response_done=pb.ResponseDone(response=pb.Response(id=response_id, status=status))
    )


def transcript(marker: str) -> pb.ConverseResponse:
    """An event that belongs to no response, labelled so a test can recognise it."""
    return pb.ConverseResponse(
        input_transcription=pb.InputTranscription(item_id=marker, transcript=marker)
    )


# -- sessions ---------------------------------------------------------------------------


@dataclass
class Opened:
    """A freshly opened session with what its first stream received."""

    registry: Registry
    session: Session
    token: str
    effects: Effects


def open_session(
    *,
    limits: Limits = LIMITS,
    engine: EngineFeatures = ENGINE,
    config: pb.SessionConfig | None = None,
    now: float = 0.0,
) -> Opened:
    registry = Registry(limits, engine)
    session, effects = registry.open(pb.OpenSession(config=config), now)
    return Opened(registry, session, token_of(effects), effects)


def token_of(effects: Effects) -> str:
    """The resume token carried by the created/resumed event among ``effects``."""
    for event in decode(effects):
        if event.HasField("session_created"):
            return event.session_created.resume_token
        if event.HasField("session_resumed"):
            return event.session_resumed.resume_token
    raise AssertionError("no session_created or session_resumed event in the effects")


def resume(session: Session, token: str, last_seq: int, now: float) -> tuple[int, Effects, str]:
    """Resumes and confirms the activation; returns the generation, effects and new token."""
    generation, effects = session.resume(token, last_seq, now)
    session.activation_delivered(generation)
    return generation, effects, token_of(effects)


def stamped(event: pb.ConverseResponse, seq: int, applied: int = 0) -> pb.ConverseResponse:
    """A copy of ``event`` numbered as the journal would number it."""
    copy = pb.ConverseResponse()
    copy.CopyFrom(event)
    copy.seq = seq
    copy.applied_client_seq = applied
    return copy
