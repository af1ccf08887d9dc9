"""A bridge in the service's process writes a command and flushes what it made right after
(bridge.transport.InlineStream): while it carries the command out, the stream's pump is not
even scheduled to wake for what the flush writes (``SendQueue.reader_flushes``)."""

from __future__ import annotations

import base64
import os

import pytest

from omni_grpc.bench.grpc_load import mirror_settings
from omni_grpc.server.send_queue import SendQueue
from tests.bridge.testkit import realtime_socket, running_bridge
from tests.serving import serving

CHUNKS = 40
CHUNK_BYTES = 960  # 20 ms of pcm16 at 24 kHz


async def test_an_echoed_chunk_schedules_no_wake_up_of_the_pump(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wake_ups = 0
    wake_soon = SendQueue._wake_soon

    def counted(self: SendQueue) -> None:
        nonlocal wake_ups
        if self._waiter is not None and not self._wake_due:
            wake_ups += 1  # one would be scheduled
        wake_soon(self)

    monkeypatch.setattr(SendQueue, "_wake_soon", counted)
    async with (
        serving(mirror_settings()) as service,
        running_bridge(service) as port,
        realtime_socket(port, "model=loopback") as ws,
    ):
        assert (await ws.recv())["type"] == "session.created"
        echoed = []
        for index in range(CHUNKS):
            chunk = os.urandom(CHUNK_BYTES)
            if index == 1:
                wake_ups = 0  # from the second chunk on: the response runs
            audio = base64.b64encode(chunk).decode()
            await ws.send({"type": "input_audio_buffer.append", "audio": audio})
            while (event := await ws.recv())["type"] != "response.output_audio.delta":
                assert event["type"] != "error", event
            echoed.append(base64.b64decode(event["delta"]) == chunk)
        during = wake_ups  # (the socket's close wakes the pump for the stream's end)
    assert all(echoed)
    assert during == 0  # each echo went out from the reading task, the pump left asleep
