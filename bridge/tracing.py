"""The bridge's span of each turn, and its context carried to the service on the commands.

A turn, seen from the bridge, starts with the first command that feeds one (audio appended,
text appended, a commit, a ``response.create``) while no turn is open, and ends when the
service answers it: ``response_done``, or ``response_listen`` when the engine chose not to
answer (or with the websocket). Its ``omni.bridge.turn`` span is the root of the turn's trace.

The ``Converse`` stream lives as long as the websocket, so the context cannot go in call
metadata: it goes in ``ConverseRequest.trace_context`` (W3C ``traceparent``/``tracestate``) on
the command that opens the turn and on every commit, text and ``response.create`` of it, which
are what may start a response. Audio appends after the first carry nothing: the hot path pays
one attribute check per chunk when tracing is on, and none of this exists when it is off.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Tracer, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import omni_grpc
from omni_grpc.wire import pb

TRACER_NAME = "bridge"
_PROPAGATOR = TraceContextTextMapPropagator()
_TURN_COMMANDS = frozenset(
    {"append_input_audio", "append_input_text", "commit_input_audio", "create_response"}
)
_TURN_ENDS = frozenset({"response_done", "response_listen"})


def bridge_tracer(provider: TracerProvider | None) -> Tracer | None:
    """The bridge's tracer from ``provider``; None (tracing off) without one."""
    if provider is None:
        return None
    return provider.get_tracer(TRACER_NAME, omni_grpc.__version__)


class RelayTurns:
    """The turns of one relayed websocket: the open turn's span and its propagated context."""

    __slots__ = ("_tracer", "_span", "_carrier")

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._span: Span | None = None
        self._carrier: dict[str, str] = {}

    def sending(self, request: pb.ConverseRequest) -> None:
        """A command goes to the service: it may open a turn, and may carry its context."""
        kind = request.WhichOneof("command")
        if kind not in _TURN_COMMANDS:
            return
        if self._span is None:
            self._span = self._tracer.start_span(
                "omni.bridge.turn", kind=SpanKind.CLIENT, attributes={"omni.turn.opened_by": kind}
            )
            self._carrier = {}
            _PROPAGATOR.inject(self._carrier, context=trace.set_span_in_context(self._span))
        elif kind == "append_input_audio":
            return
        request.trace_context.update(self._carrier)

    def received(self, kind: str | None, event: pb.ConverseResponse) -> None:
        """An event came from the service: the answer to the turn ends its span."""
        if kind not in _TURN_ENDS or self._span is None:
            return
        if kind == "response_done":
            response = event.response_done.response
            self._span.set_attributes(
                {
                    "omni.response.id": response.id,
                    "omni.response.status": pb.ResponseStatus.Name(response.status),
                }
            )
        self._end(kind)

    def close(self) -> None:
        """The websocket is gone: a turn still open ends with it."""
        self._end("connection_closed")

    def _end(self, reason: str) -> None:
        span, self._span = self._span, None
        if span is not None:
            span.set_attribute("omni.turn.ended_by", reason)
            span.end()


__all__ = ["RelayTurns", "bridge_tracer"]
