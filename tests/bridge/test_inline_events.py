"""A bridge in the service's process sends what a command made at once from the task that read
the command (bridge.transport.InlineStream), and the rest from its pump: every event still goes
out once, in the journal's order, whichever task sent it."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Awaitable, Callable

import pytest

from omni_grpc.bench.grpc_load import mirror_settings
from omni_grpc.server.local_stream import LocalStream
from tests.bridge.testkit import realtime_socket, running_bridge
from tests.serving import serving

CHUNKS = 120
CHUNK_BYTES = 960  # 20 ms of pcm16 at 24 kHz


async def test_echoed_chunks_go_out_inline_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = 0
    flush = LocalStream.flush

    async def counting(self: LocalStream, write: Callable[[bytes], Awaitable[None]]) -> None:
        async def counted(payload: bytes) -> None:
            nonlocal taken
            taken += 1
            await write(payload)

        await flush(self, counted)

    monkeypatch.setattr(LocalStream, "flush", counting)
    chunks = [os.urandom(CHUNK_BYTES) for _ in range(CHUNKS)]
    async with (
        serving(mirror_settings()) as service,
        running_bridge(service) as port,
        realtime_socket(port, "model=loopback&extensions=1") as ws,
    ):
        assert (await ws.recv())["type"] == "session.created"
        for index, chunk in enumerate(chunks):
            await ws.send(
                {"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()}
            )
            if index % 10 == 9:
                await ws.send({"type": "session.heartbeat"})
                await asyncio.sleep(0.01)  # within the rate limits
        deltas: list[bytes] = []
        seqs: list[int] = []
        async with asyncio.timeout(20):
            while len(deltas) < CHUNKS:
                event = await ws.recv()
                if "server_event_seq" in event:
                    seqs.append(event["server_event_seq"])
                if event["type"] == "response.output_audio.delta":
                    deltas.append(base64.b64decode(event["delta"]))
                assert event["type"] != "error", event
    assert b"".join(deltas) == b"".join(chunks)  # every chunk back once, in order
    assert seqs == sorted(set(seqs)), "journaled events out of order or twice"
    assert taken >= CHUNKS  # the echoes went out from the reading task, not the pump
