"""OpenAI's dialect of one connection, as its relay sees it (:class:`bridge.dialect.Dialect`).

A :class:`RealtimeDialect` pairs an inbound half (client frames → commands) with an outbound
half (contract events → JSON events; it holds what one session's expansion needs). OpenAI's
halves are :class:`RealtimeInbound` and :class:`bridge.realtime.outbound.RealtimeOutbound`;
vLLM-Omni's dialect is the same pair with halves of its own (:mod:`bridge.vllm_omni.dialect`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from bridge.dialect import Event, Opening
from bridge.errors import DialectError, Refusal
from bridge.realtime import client_events as ce
from bridge.realtime import inbound
from bridge.realtime.fast_append import append_request
from bridge.realtime.outbound import RealtimeOutbound
from bridge.realtime.server_events import refusal_events
from bridge.realtime.unhonoured import refuse_unhonoured
from omni_grpc.wire import pb


class Inbound(Protocol):
    """A dialect's inbound half: client frames → unnumbered commands; raises DialectError."""

    def decode(self, frame: str | bytes) -> Any:
        """One frame as a typed client event."""
        ...

    def to_request(self, event: Any) -> pb.ConverseRequest:
        """The command of a decoded event."""
        ...

    def request(self, frame: str | bytes) -> pb.ConverseRequest:
        """One frame's command (decode, then to_request)."""
        ...

    def open_request(self, event: ce.SessionUpdate | None, *, model: str) -> pb.ConverseRequest:
        """The ``open_session`` of a connection, with the first event's configuration if any."""
        ...

    def resume_request(self, event: ce.SessionResume) -> pb.ConverseRequest:
        """The ``resume_session`` of a connection whose first event resumes."""
        ...

    def ends_handshake(self, error: DialectError) -> bool:
        """Whether a first frame refused with ``error`` ends the connection."""
        ...


class RealtimeInbound:
    """The OpenAI dialect's inbound half: :mod:`bridge.realtime.inbound` as it is."""

    def decode(self, frame: str | bytes) -> Any:
        return self._validated(inbound.parse_client_frame(frame))

    @classmethod
    def decode_event(cls, data: dict[str, Any]) -> Any:
        """One event already parsed from JSON, as a typed client event."""
        return cls._validated(data)

    def to_request(self, event: Any) -> pb.ConverseRequest:
        return inbound.to_request(event)

    def request(self, frame: str | bytes) -> pb.ConverseRequest:
        # Parsed once; a plain audio append (most frames) skips the models:
        # bridge.realtime.fast_append.
        data = inbound.parse_client_frame(frame)
        fast = append_request(data)
        return fast if fast is not None else inbound.to_request(self._validated(data))

    @staticmethod
    def _validated(data: dict[str, Any]) -> Any:
        event = inbound.validate_client_event(data)
        if isinstance(event, ce.SessionUpdate | ce.ResponseCreate):
            # The few events that may set a GA field the service cannot honour are read as
            # sent: the models leave out what they do not carry (bridge.realtime.unhonoured).
            refuse_unhonoured(data)
        return event

    def open_request(self, event: ce.SessionUpdate | None, *, model: str) -> pb.ConverseRequest:
        return inbound.open_request(event.session if event is not None else None, model=model)

    def resume_request(self, event: ce.SessionResume) -> pb.ConverseRequest:
        return inbound.resume_request(event)

    def ends_handshake(self, error: DialectError) -> bool:
        return False  # a refused first event is answered in band; the client may try again


class RealtimeDialect:
    """One connection's dialect of the Realtime family: OpenAI's, or one built on it."""

    def __init__(self, inbound: Inbound, outbound: RealtimeOutbound) -> None:
        self.inbound = inbound
        self.outbound = outbound
        # Every frame takes these two: the halves' own, with no call in between.
        self.request: Callable[[str | bytes], pb.ConverseRequest] = inbound.request
        self.expand: Callable[[pb.ConverseResponse], list[Event]] = outbound.expand

    @property
    def session_id(self) -> str:
        return self.outbound.session_id

    def open_request(self, *, model: str) -> pb.ConverseRequest:
        return self.inbound.open_request(None, model=model)

    def opening(self, frame: str | bytes, *, model: str) -> Opening:
        event = self.inbound.decode(frame)
        if isinstance(event, ce.SessionResume):
            # Only a client of our duplex protocol resumes: it gets its extensions.
            self.outbound.extensions = True
            return Opening(self.inbound.resume_request(event))
        if isinstance(event, ce.SessionUpdate):
            first = self.inbound.open_request(event, model=model)
            first.event_id = event.event_id
            return Opening(first, update_id=event.event_id or "")
        first = self.inbound.open_request(None, model=model)
        return Opening(first, then=self.inbound.to_request(event))

    def ends_handshake(self, error: DialectError) -> bool:
        return self.inbound.ends_handshake(error)

    def error_events(self, refusal: Refusal) -> list[Event]:
        return self.outbound.shown(refusal_events(refusal))


def minted_config(session: Any) -> pb.SessionConfig:
    """The configuration a client secret is minted with: the ``session`` of its request, read
    as the ``session`` of a first ``session.update`` is (the same fields, refusals and
    unhonoured ones); raises DialectError."""
    if not isinstance(session, dict):
        raise DialectError("invalid_session_config", "session must be an object", param="session")
    event = RealtimeInbound.decode_event({"type": "session.update", "session": session})
    assert isinstance(event, ce.SessionUpdate)
    return inbound.open_request(event.session).open_session.config


def openai_dialect(*, max_audio_delta_bytes: int, extensions: bool = False) -> RealtimeDialect:
    """OpenAI's dialect for one connection; ``extensions`` says whether its client asked for
    our duplex extensions (``?extensions=1``)."""
    outbound = RealtimeOutbound(max_audio_delta_bytes=max_audio_delta_bytes, extensions=extensions)
    return RealtimeDialect(RealtimeInbound(), outbound)
