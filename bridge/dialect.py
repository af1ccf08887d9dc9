"""What a relay asks of the dialect its connection speaks, so that the relay names none.

A dialect translates one connection both ways: the client's JSON frames into the contract's
commands, and the contract's events into the JSON events its clients know. The relay moves
them, numbers the commands (``client_seq`` is the contract's business, the same in every
dialect), and decides when to open, resume, retry and close; every frame it sends comes from
its dialect: the stream's events, and the errors the bridge tells of itself
(:class:`bridge.errors.Refusal`). :mod:`bridge.dialects` makes one per connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from bridge.errors import DialectError, Refusal
from omni_grpc.wire import pb

# One JSON event, as a dialect renders it.
Event = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Opening:
    """How the first frame of a connection opens its stream."""

    request: pb.ConverseRequest  # the stream's first request: open_session or resume_session
    then: pb.ConverseRequest | None = None  # the frame's own command, sent once the stream opens
    # The event id of the session.update that opened the stream with the client's configuration
    # ("" when it had none), which the relay answers if the service refuses that configuration;
    # None when the stream opened otherwise.
    update_id: str | None = None


class Dialect(Protocol):
    """One connection's translation, both ways, as its relay sees it."""

    @property
    def session_id(self) -> str:
        """The session the connection carries, once the service has named it ("" before)."""
        ...

    def open_request(self, *, model: str) -> pb.ConverseRequest:
        """The ``open_session`` of a connection that opens with the default configuration."""
        ...

    def opening(self, frame: str | bytes, *, model: str) -> Opening:
        """How the connection's first frame opens its stream; raises DialectError."""
        ...

    def ends_handshake(self, error: DialectError) -> bool:
        """Whether a first frame refused with ``error`` ends the connection."""
        ...

    def request(self, frame: str | bytes) -> pb.ConverseRequest:
        """The unnumbered command of a later frame; raises DialectError."""
        ...

    def expand(self, response: pb.ConverseResponse) -> list[Event]:
        """The JSON events of one contract event, as this client gets them."""
        ...

    def error_events(self, refusal: Refusal) -> list[Event]:
        """The JSON events that tell this client of an error the bridge reports itself."""
        ...


__all__ = ["Dialect", "Event", "Opening"]
