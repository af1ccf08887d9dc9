"""A websocket client that stops reading: 1013 ``slow_consumer`` within the send deadline.

The client's socket has a small receive buffer and the client reads nothing while a long
answer streams, so the bridge's sends wait for room. After the send deadline the bridge ends
its gRPC stream (the service detaches the session, which stays resumable) and closes the
websocket with 1013; a client that reads again gets the frames the socket held, then that
close frame, and resumes the session on a new websocket.
"""

from __future__ import annotations

import base64
import socket
import time
from typing import Any

import aiohttp

from omni_grpc.core import State
from omni_grpc.server.app import RunningServer
from tests.bridge.testkit import WITH_EXTENSIONS, RealtimeSocket, realtime_socket, running_bridge
from tests.serving import eventually

SEND_DEADLINE_S = 1.0
ANSWER_S = 60  # of input, answered by as much output audio: megabytes the client leaves unread


def small_receive_buffer(addr_info: Any) -> socket.socket:
    """A client socket that holds little, so an unread answer fills it fast."""
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    return sock


async def test_a_client_that_stops_reading_is_closed_with_1013(service: RunningServer) -> None:
    pcm = b"\x10\x00" * (24000 * ANSWER_S)
    connector = aiohttp.TCPConnector(socket_factory=small_receive_buffer)
    async with (
        running_bridge(service.target, send_deadline_s=SEND_DEADLINE_S) as port,
        aiohttp.ClientSession(connector=connector) as http,
        http.ws_connect(f"http://127.0.0.1:{port}/v1/realtime?{WITH_EXTENSIONS}") as raw,
    ):
        ws = RealtimeSocket(raw, extensions=True)  # it resumes later
        created = await ws.recv()
        assert created["type"] == "session.created"
        [session] = service.registry
        await ws.send(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}
        )
        await ws.send({"type": "input_audio_buffer.commit", "create_response": True})
        stopped = time.monotonic()

        # Reading nothing: the bridge gives up on the client and ends its stream.
        await eventually(lambda: session.state is State.DETACHED, timeout_s=20.0)
        detached_s = time.monotonic() - stopped
        assert detached_s >= SEND_DEADLINE_S  # it waited the deadline out first

        # Reading again: the frames the socket held, then the close frame.
        while True:
            message = await raw.receive(timeout=10.0)
            if message.type is not aiohttp.WSMsgType.TEXT:
                break
        assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), message
        assert raw.close_code == aiohttp.WSCloseCode.TRY_AGAIN_LATER
        assert message.extra == "slow_consumer"
        assert session.state is State.DETACHED  # resumable, not ended

        # A new websocket resumes the session, and the answer goes on to its end.
        async with realtime_socket(port, "") as again:
            await again.send(
                {
                    "type": "session.resume",
                    "session_id": created["session"]["id"],
                    "resume_token": created["resume_token"],
                }
            )
            assert (await again.recv())["type"] == "session.resumed"
            await again.until("response.done", wait_s=30.0)
