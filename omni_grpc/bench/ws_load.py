"""The websocket side of the benchmarks: Realtime sessions that load a websocket server.

Each session sends one ``input_audio_buffer.append`` frame per chunk and books every
``response.output_audio.delta`` as the answer to its oldest unanswered chunk: our bridge, the
raw websocket echo (``scripts/bench_bridge.py``) and vLLM-Omni's server
(``scripts/bench_peer.py``) all answer so. How a session opens is each server's own; the
benchmarks subclass :class:`WsSession` for it.
"""

from __future__ import annotations

import base64
import contextlib
from collections import deque

import aiohttp
import orjson
from aiohttp import WSMsgType

from omni_grpc.bench import harness

DELTA = "response.output_audio.delta"


def append_frame(audio: bytes) -> bytes:
    """One chunk of client audio as a Realtime client sends it (pcm16 in base64)."""
    return orjson.dumps(
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode()}
    )


class WsSession:
    """One websocket session of a paced load (:class:`~.harness.LoadSession`).

    ``acks``: it acknowledges the events it read (``server_event_seq``, every
    :data:`~.harness.ACK_EVERY`), as a client of our bridge's duplex extensions does.
    ``closes_session``: it closes the session before the socket, for a server that would keep
    a session whose socket dropped resumable.
    """

    acks = False
    closes_session = True

    def __init__(self, http: aiohttp.ClientSession, url: str, frame: bytes) -> None:
        self.http, self.url, self.frame = http, url, frame
        self.sent: deque[float] = deque()
        self.ack = 0  # the server_event_seq to acknowledge with the next chunk
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    async def connect(self) -> aiohttp.ClientWebSocketResponse:
        """Opens the socket (no limit on the size of what comes back)."""
        self.ws = await self.http.ws_connect(
            self.url, max_msg_size=0, timeout=aiohttp.ClientWSTimeout(ws_close=2.0)
        )
        return self.ws

    async def open(self) -> None:
        await self.connect()

    async def send(self) -> None:
        assert self.ws is not None
        if self.ack:
            ack = {"type": "session.event_ack", "server_event_seq": self.ack}
            self.ack = 0
            await self.ws.send_frame(orjson.dumps(ack), WSMsgType.TEXT)
        await self.ws.send_frame(self.frame, WSMsgType.TEXT)

    async def read(self, tally: harness.Tally) -> None:
        assert self.ws is not None
        async for message in self.ws:
            if message.type is not WSMsgType.TEXT:
                break
            event = orjson.loads(message.data)
            kind = event.get("type")
            if kind == DELTA:
                tally.answer(self.sent)
                seq = event.get("server_event_seq", 0)
                if self.acks and seq % harness.ACK_EVERY == 0:
                    self.ack = seq
            elif kind == "error":
                tally.errors.append(str(event.get("error") or event))

    async def close(self) -> None:
        assert self.ws is not None
        if self.closes_session and not self.ws.closed:
            # Close the session, not just the socket: a dropped socket leaves it resumable.
            with contextlib.suppress(ConnectionError):
                await self.ws.send_frame(b'{"type":"session.close"}', WSMsgType.TEXT)
        await self.ws.close()
