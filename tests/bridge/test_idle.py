"""Half-sent HTTP requests to the bridge are closed at the header timeout; websockets are not."""

from __future__ import annotations

import asyncio
import time

from omni_grpc.server.app import RunningServer
from tests.bridge.testkit import realtime_socket, running_bridge

TIMEOUT_S = 0.5
HALF_REQUEST = b"GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # no blank line: never ends


async def seconds_until_closed(port: int) -> float:
    started = time.monotonic()  # before the connection: the server's timer starts at accept
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HALF_REQUEST)
    try:
        async with asyncio.timeout(5.0):
            assert await reader.read() == b""  # closed without an answer
        return time.monotonic() - started
    finally:
        writer.close()


async def test_half_sent_requests_are_closed_and_websockets_stay(service: RunningServer) -> None:
    async with (
        running_bridge(service.target, header_timeout_s=TIMEOUT_S) as port,
        realtime_socket(port) as ws,
    ):
        assert (await ws.recv())["type"] == "session.created"
        closed_s = await asyncio.gather(*(seconds_until_closed(port) for _ in range(50)))
        assert all(TIMEOUT_S * 0.8 <= s < TIMEOUT_S + 2.0 for s in closed_s), closed_s
        # The websocket, open for longer than the timeout, still works.
        await ws.send({"type": "input_audio_buffer.clear"})
        assert (await ws.recv())["type"] == "input_audio_buffer.cleared"
