"""The two dialects the bridge speaks, and which one a connection gets.

* ``openai``: OpenAI's Realtime API (GA names, beta spellings accepted), on ``/v1/realtime``;
  :mod:`bridge.realtime.inbound` and :mod:`bridge.realtime.outbound`.
* ``vllm-omni``: vLLM-Omni's duplex serving, on ``/v1/duplex`` and on
  ``/v1/realtime?duplex=1`` (the URL vLLM-Omni's clients build), so its clients work unchanged;
  :mod:`bridge.vllm_omni.inbound` and :mod:`bridge.vllm_omni.outbound`.

A :class:`Dialect` pairs a connection's inbound translation with its outbound expansion. The
map of every contract command and event to its JSON events in each dialect is
``docs/dialects.md``, generated from these by ``scripts/dialect_map.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from bridge.errors import DialectError
from bridge.realtime import client_events as ce
from bridge.realtime import inbound
from bridge.realtime.fast_append import append_request
from bridge.realtime.outbound import RealtimeOutbound
from bridge.realtime.unhonoured import refuse_unhonoured
from bridge.vllm_omni.inbound import VllmOmniInbound
from bridge.vllm_omni.outbound import VllmOmniOutbound
from omni_grpc.wire import pb

OPENAI = "openai"
VLLM_OMNI = "vllm-omni"
VLLM_OMNI_PATH = "/v1/duplex"
_TRUE = frozenset({"1", "true", "yes", "on"})


class Inbound(Protocol):
    """What a relay asks of a dialect's inbound side."""

    def decode(self, frame: str | bytes) -> Any: ...

    def to_request(self, event: Any) -> pb.ConverseRequest: ...

    def request(self, frame: str | bytes) -> pb.ConverseRequest:
        """One frame's unnumbered command (decode, then to_request); raises DialectError."""
        ...

    def open_request(self, event: ce.SessionUpdate | None, *, model: str) -> pb.ConverseRequest: ...

    def ends_handshake(self, error: DialectError) -> bool: ...


class RealtimeInbound:
    """The OpenAI dialect's inbound side: :mod:`bridge.realtime.inbound` as it is."""

    def decode(self, frame: str | bytes) -> Any:
        return self._validated(inbound.parse_client_frame(frame))

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

    def ends_handshake(self, error: DialectError) -> bool:
        return False  # a refused first event is answered in band; the client may try again


@dataclass(frozen=True, slots=True)
class Dialect:
    """One connection's translation, both ways."""

    name: str
    inbound: Inbound
    outbound: RealtimeOutbound


def dialect_name(path: str, query: Mapping[str, str]) -> str:
    """The dialect of a connection to ``path`` with ``query``."""
    if path == VLLM_OMNI_PATH or query.get("duplex", "").lower() in _TRUE:
        return VLLM_OMNI
    return OPENAI


def make_dialect(name: str, *, max_audio_delta_bytes: int, extensions: bool = False) -> Dialect:
    """A fresh dialect (its outbound side holds one session's state); ``extensions`` says
    whether an OpenAI-dialect client asked for the duplex extensions."""
    if name == VLLM_OMNI:
        reference = VllmOmniOutbound(max_audio_delta_bytes=max_audio_delta_bytes)
        return Dialect(VLLM_OMNI, VllmOmniInbound(reference), reference)
    outbound = RealtimeOutbound(max_audio_delta_bytes=max_audio_delta_bytes)
    outbound.extensions = extensions
    return Dialect(OPENAI, RealtimeInbound(), outbound)
