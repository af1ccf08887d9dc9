"""The client's websocket as a relay writes to it: no frame, and no close, waits forever.

A client that stops reading fills its socket, and aiohttp's send then waits for room. A relay
cannot wait on one client for ever, so a send and the close wait at most the send deadline: a
send that would wait longer raises :class:`ClientFellBehind` (the relay then ends the
connection, 1013 ``slow_consumer``), and a close frame that cannot go out drops the connection.
"""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import WSMessage, WSMsgType, web

from bridge.dialect import Event


class ClientFellBehind(Exception):
    """A frame waited longer than the send deadline for room in the client's socket."""


class ClientSocket:
    """One client's websocket as a :class:`bridge.carrier.Carrier`: sends JSON events, each
    within the send deadline."""

    __slots__ = ("_deadline_s", "_transport", "ws")

    def __init__(
        self, ws: web.WebSocketResponse, transport: asyncio.Transport | None, deadline_s: float
    ) -> None:
        self.ws = ws
        self._transport = transport  # the client's connection, dropped if it never reads again
        self._deadline_s = deadline_s

    @property
    def closed(self) -> bool:
        return self.ws.closed

    async def receive(self) -> WSMessage:
        return await self.ws.receive()

    async def send(self, event: Event) -> None:
        """Sends one event; raises ClientFellBehind if it waits too long for room."""
        frame = orjson.dumps(event)
        transport = self._transport
        if (
            transport is not None
            and transport.get_write_buffer_size() == 0
            and len(frame) < transport.get_write_buffer_limits()[1] // 2
        ):
            # Nothing waits in the socket and the frame fits far below its high-water mark, so
            # the write cannot pause the connection and send_frame returns without waiting: no
            # deadline to arm (arming one costs more than the rest of a small frame's send).
            await self.ws.send_frame(frame, WSMsgType.TEXT)
            return
        try:
            async with asyncio.timeout(self._deadline_s):
                # The frame is in the socket's buffer at once; the wait is for it to drain.
                await self.ws.send_frame(frame, WSMsgType.TEXT)
        except TimeoutError:
            raise ClientFellBehind from None

    async def close(self, code: int, reason: str) -> None:
        """Closes the websocket, dropping the connection if the close frame cannot go out."""
        try:
            async with asyncio.timeout(self._deadline_s):
                await self.ws.close(code=code, message=reason.encode()[:120])
        except TimeoutError:
            # The close frame still waits behind unread frames: a client that does not read
            # cannot be told anything, and its connection would otherwise stay forever.
            if self._transport is not None:
                self._transport.abort()


__all__ = ["ClientFellBehind", "ClientSocket"]
