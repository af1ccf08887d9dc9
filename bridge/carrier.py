"""What a relay asks of the connection that carries its client's events, so that it names none.

A relay (:mod:`bridge.relay`) serves one client over one carrier: the websocket
(:class:`bridge.client_socket.ClientSocket`) or a WebRTC call's ``oai-events`` data channel and
its audio tracks (:mod:`bridge.webrtc.carrier`). Both carry the same JSON events of the
connection's dialect; a carrier may also hand the relay a contract command it made itself (the
audio a WebRTC call's track brought in), which goes to the service as the dialect's own
commands do, numbered by the relay. The rules a carrier holds:

* :meth:`Carrier.receive` answers an aiohttp ``WSMessage`` (TEXT for a client event, CLOSE
  when the client is gone) or a ready :class:`~omni_grpc.wire.pb.ConverseRequest`;
* :meth:`Carrier.send` raises :class:`bridge.client_socket.ClientFellBehind` when the client
  cannot take an event within the send deadline, and ``ConnectionError`` when it is gone;
* :meth:`Carrier.close` never waits longer than the send deadline.
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import WSMessage

from bridge.dialect import Event
from omni_grpc.wire import pb

# What a carrier hands its relay: a client's message, or a command the carrier made itself.
Inbound = WSMessage | pb.ConverseRequest


class Carrier(Protocol):
    """One client's connection, as its relay sees it."""

    @property
    def closed(self) -> bool:
        """Whether the connection is closed or closing."""
        ...

    async def receive(self) -> Inbound:
        """The client's next message (a caller bounds the wait with ``asyncio.timeout``)."""
        ...

    async def send(self, event: Event) -> None:
        """Sends one JSON event to the client."""
        ...

    async def close(self, code: int, reason: str) -> None:
        """Closes the connection with a websocket close code and reason."""
        ...


__all__ = ["Carrier", "Inbound"]
