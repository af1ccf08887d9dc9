"""One OpenTelemetry trace per turn: the server's turn span and its stage spans.

A ``Converse`` stream lives for a whole conversation, so call metadata cannot say which trace a
turn belongs to. A client that traces puts the W3C context of its turn (``traceparent``,
``tracestate``) in ``ConverseRequest.trace_context`` on the command that starts the turn (the
websocket bridge does); a new ``traceparent`` starts the server's ``omni.turn`` span as a child
of it. Turns that start with no context (a client that does not trace, a turn the engine's
server VAD opened) get a root ``omni.turn`` of their own.

Engines know nothing of tracing: the stage spans are built here from the contract's events as
the host takes them from the engine, with explicit start and end times on the server's clock:

* ``omni.vad``: from ``speech_started`` to ``speech_stopped`` (the end of speech the VAD found);
* ``omni.asr``: from the commit (``input_committed``) to ``input_transcription`` (or to
  ``input_transcription_failed``, with ``omni.failed`` 1);
* ``omni.lm.first_token``: from ``response_created`` to the language model's first token: the
  moment the engine tells through ``EngineSession.on_stage`` (the embedded engine does: it sends
  text only with the audio made from it), else the response's first text event;
* ``omni.tts.first_audio``: from that first token (or ``response_created``, when audio comes
  before any) to the first ``output_audio_delta``.

Under semantic turn detection the turn span carries the judgement that ended the turn (the
last ``turn_end_decision`` before its response): ``omni.turn_end.probability``, ``.wait_ms``
and ``.decided_ms``, and each judge's own verdict where it judged
(``omni.turn_end.sound_probability``, ``.words_probability``).

``response_done`` (or ``response_listen``, the engine choosing not to answer) ends the turn, with
the engine's own ``TurnLatency`` and usage as attributes; in a transcription session, which
never answers, the turn's transcript (or its failure) ends it. No transcript or audio goes into
a span.

:class:`TurnTraces` is a tap of the session host (:mod:`omni_grpc.server.taps`): when tracing
is off the host has no such tap, and pays nothing for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import omni_grpc
from omni_grpc.core import Effects
from omni_grpc.server.taps import HostTap, SessionHost
from omni_grpc.wire import pb
from omni_grpc.wire.kinds import RESPONSE_OUTPUT_EVENTS

TRACER_NAME = "omni_grpc.server"
_PROPAGATOR = TraceContextTextMapPropagator()

# Events that open a turn when none is open (a turn the client did not announce).
_TURN_OPENERS = frozenset({"speech_started", "input_committed", "response_created"})
_TEXT_EVENTS = frozenset({"output_text_delta", "output_audio_transcript_delta"})


def server_tracer(provider: TracerProvider | None) -> Tracer | None:
    """The server's tracer from ``provider``; None (tracing off) without one."""
    if provider is None:
        return None
    return provider.get_tracer(TRACER_NAME, omni_grpc.__version__)


@dataclass(slots=True)
class _Turn:
    """One open turn: its span and the moments its stages start from (ns, server clock)."""

    span: Span
    context: Context  # the turn span's context: the parent of its stage spans
    started_ns: int
    speech_started_ns: int | None = None
    committed_ns: int | None = None
    response_id: str = ""
    response_ns: int | None = None
    first_token_ns: int | None = None
    first_audio_ns: int | None = None


class TurnTraces(HostTap):
    """The turns of one session, as spans: fed every command and engine event by its host."""

    __slots__ = (
        "_tracer",
        "_session_id",
        "_parent",
        "_traceparent",
        "_turn",
        "_waiting",
        "_first_tokens",
        "_side",
    )

    def __init__(self, tracer: Tracer, session_id: str) -> None:
        self._tracer = tracer
        self._session_id = session_id
        self._parent: Context | None = None  # the last context a client sent
        self._traceparent = ""
        self._turn: _Turn | None = None
        # A turn a client opened while the open one's answer was still coming: (start, opened by).
        self._waiting: tuple[int, str] | None = None
        # When the engine said each response's first token came, until that response is done:
        # it may tell before the host has taken the response's earlier events.
        self._first_tokens: dict[str, int] = {}
        # The out-of-band responses running: no turn's, so none of their events is traced.
        self._side: set[str] = set()

    def stage(self, name: str, response_id: str) -> None:
        """The engine says a response reached a stage no event shows (see ``on_stage``)."""
        if name == "first_token":
            self._first_tokens.setdefault(response_id, time.time_ns())

    def admitted(
        self, host: SessionHost, generation: int, request: pb.ConverseRequest, effects: Effects
    ) -> None:
        self.command(request)

    def event(self, host: SessionHost, kind: str | None, event: pb.ConverseResponse) -> None:
        transcribing = host.session.config.type == pb.SESSION_TYPE_TRANSCRIPTION
        self.engine_event(kind, event, transcribing=transcribing)

    def ended(self, host: SessionHost) -> None:
        self.close()

    def command(self, request: pb.ConverseRequest) -> None:
        """A command came in: a new trace context starts a new turn under it."""
        carrier = request.trace_context
        if not carrier:
            return
        traceparent = carrier.get("traceparent", "")
        if traceparent == self._traceparent:
            return  # the turn already open (a commit or response.create of the same turn)
        self._traceparent = traceparent
        self._parent = _PROPAGATOR.extract(carrier=dict(carrier))
        now, opened_by = time.time_ns(), request.WhichOneof("command") or ""
        if self._turn is not None and self._turn.response_id:
            # The open turn's answer is still coming (a client that resumed mid-answer): the new
            # turn starts when it is done, so the answer's events stay in their own turn.
            self._waiting = (now, opened_by)
            return
        self._end_turn("superseded")
        self._open_turn(now, opened_by=opened_by)

    def engine_event(
        self, kind: str | None, event: pb.ConverseResponse, *, transcribing: bool = False
    ) -> None:
        """An engine event went by: it may start, end or mark a stage of the turn
        (``transcribing``: in a transcription session, whose turns end at their transcript)."""
        if (self._side or kind == "response_created") and self._out_of_band(kind, event):
            return
        now = time.time_ns()
        turn = self._turn
        if turn is None:
            if kind not in _TURN_OPENERS:
                return
            turn = self._open_turn(now, opened_by=kind or "")
        if kind == "speech_started":
            turn.speech_started_ns = now
        elif kind == "speech_stopped":
            stopped = event.speech_stopped
            self._stage(
                turn, "omni.vad", turn.speech_started_ns, now, audio_end_ms=stopped.audio_end_ms
            )
        elif kind == "turn_end_decision":
            decision = event.turn_end_decision
            attributes: dict[str, float] = {
                "omni.turn_end.probability": decision.probability,
                "omni.turn_end.wait_ms": decision.wait_ms,
                "omni.turn_end.decided_ms": decision.decided_ms,
            }
            for judge in ("sound_probability", "words_probability"):
                if decision.HasField(judge):
                    attributes[f"omni.turn_end.{judge}"] = getattr(decision, judge)
            turn.span.set_attributes(attributes)
        elif kind == "input_committed":
            turn.committed_ns = now
        elif kind == "input_transcription":
            chars = len(event.input_transcription.transcript)
            self._stage(turn, "omni.asr", turn.committed_ns, now, transcript_chars=chars)
            if transcribing:
                self._end_turn("input_transcription", now)
        elif kind == "input_transcription_failed":
            self._stage(turn, "omni.asr", turn.committed_ns, now, failed=1)
            if transcribing:
                self._end_turn("input_transcription_failed", now)
        elif kind == "response_created":
            turn.response_ns = now
            turn.response_id = event.response_created.response.id
        elif kind in _TEXT_EVENTS and turn.first_token_ns is None:
            self._first_token(turn, self._first_tokens.get(turn.response_id, now))
        elif kind == "output_audio_delta" and turn.first_audio_ns is None:
            turn.first_audio_ns = now
            if turn.first_token_ns is None and turn.response_id in self._first_tokens:
                self._first_token(turn, self._first_tokens[turn.response_id])
            self._stage(turn, "omni.tts.first_audio", turn.first_token_ns or turn.response_ns, now)
        elif kind == "response_done":
            response = event.response_done.response
            self._first_tokens.pop(response.id, None)
            _describe_response(turn.span, response)
            self._end_turn("response_done", now)
            self._open_waiting()
        elif kind == "response_listen":
            self._end_turn("response_listen", now)
            self._open_waiting()

    def _out_of_band(self, kind: str | None, event: pb.ConverseResponse) -> bool:
        """Whether ``event`` is of an out-of-band response (which answers no turn), keeping
        the running ones' ids from their start to their end."""
        if kind == "response_created":
            response = event.response_created.response
            if response.conversation != pb.RESPONSE_CONVERSATION_NONE:
                return False
            self._side.add(response.id)
            return True
        if kind == "response_done":
            response_id = event.response_done.response.id
            if response_id in self._side:
                self._side.discard(response_id)
                self._first_tokens.pop(response_id, None)
                return True
            return False
        if kind in RESPONSE_OUTPUT_EVENTS:
            return str(getattr(event, kind).response_id) in self._side
        return False

    def _open_waiting(self) -> None:
        if self._waiting is not None:
            (start_ns, opened_by), self._waiting = self._waiting, None
            self._open_turn(start_ns, opened_by=opened_by)

    def _first_token(self, turn: _Turn, at_ns: int) -> None:
        turn.first_token_ns = at_ns
        # The engine may tell of the token before the host took response_created.
        start = min(turn.response_ns, at_ns) if turn.response_ns is not None else None
        self._stage(turn, "omni.lm.first_token", start, at_ns)

    def close(self) -> None:
        """The session ended: a turn still open ends with it."""
        self._waiting = None
        self._end_turn("session_ended")

    def _open_turn(self, now: int, *, opened_by: str) -> _Turn:
        span = self._tracer.start_span(
            "omni.turn",
            context=self._parent,
            kind=SpanKind.SERVER,
            start_time=now,
            attributes={"omni.session_id": self._session_id, "omni.turn.opened_by": opened_by},
        )
        self._turn = _Turn(span, trace.set_span_in_context(span), now)
        return self._turn

    def _end_turn(self, reason: str, now: int | None = None) -> None:
        turn, self._turn = self._turn, None
        if turn is not None:
            turn.span.set_attribute("omni.turn.ended_by", reason)
            turn.span.end(end_time=now)

    def _stage(
        self, turn: _Turn, name: str, start_ns: int | None, end_ns: int, **attributes: float
    ) -> None:
        """A finished stage: from ``start_ns`` (the turn's start when unknown) to ``end_ns``."""
        span = self._tracer.start_span(
            name,
            context=turn.context,
            start_time=turn.started_ns if start_ns is None else start_ns,
            attributes={f"omni.{key}": value for key, value in attributes.items()},
        )
        span.end(end_time=end_ns)


def _describe_response(span: Span, response: pb.Response) -> None:
    """The engine's own measures of the response (ms from the turn's commit, its clock)."""
    latency, usage = response.latency, response.usage
    span.set_attributes(
        {
            "omni.response.id": response.id,
            "omni.response.status": pb.ResponseStatus.Name(response.status),
            "omni.response.status_reason": response.status_reason,
            "omni.latency.first_text_ms": latency.first_text_ms,
            "omni.latency.first_audio_ms": latency.first_audio_ms,
            "omni.latency.total_ms": latency.total_ms,
            "omni.latency.real_time_factor": latency.real_time_factor,
            "omni.usage.input_tokens": usage.input_tokens,
            "omni.usage.output_tokens": usage.output_tokens,
            "omni.usage.output_audio_ms": usage.output_audio_ms,
        }
    )
    if response.status == pb.RESPONSE_STATUS_FAILED:
        span.set_status(StatusCode.ERROR, response.status_reason)


__all__ = ["TurnTraces", "server_tracer"]
