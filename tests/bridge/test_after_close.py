"""Commands a client sends after its own ``session.close``, in the same burst.

The service ends the stream once the session has closed; a command the bridge wrote on it then
could not be applied, and over gRPC it races the stream's end (grpc.aio then reports the call as
INTERNAL, "Internal error from Core", instead of its real end). The bridge writes nothing after
the session's end: the client gets ``session.closed`` and a clean close, never an error, on
every path.
"""

from __future__ import annotations

import base64

from tests.bridge.testkit import realtime_socket

APPEND = {"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(960)).decode()}
ROUNDS = 10


async def test_commands_after_session_close_end_nothing_badly(bridge_port: int) -> None:
    for _ in range(ROUNDS):  # a race: give it several chances to show
        async with realtime_socket(bridge_port, "model=loopback-test&extensions=1") as ws:
            assert (await ws.recv())["type"] == "session.created"
            await ws.send({"type": "session.close"})
            for _ in range(20):
                await ws.send(APPEND)
            events = []
            while (event := await ws.recv())["type"] != "session.closed":
                events.append(event)
            assert [e for e in events if e["type"] == "error"] == []
            assert await ws.closed() == (1000, "session_closed")
