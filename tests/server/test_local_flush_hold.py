"""The in-process stream's hold on the writer's wake-up (``LocalStream.write`` with
``flush_follows``, as the bridge's relay writes a command and flushes right after): what the
command made is left for the caller's flush, so no wake-up of the task that reads the stream is
even scheduled for it; a command refused for rate gives the hold up before its writer is held
back, so the refusal reaches the reading task meanwhile; a flush that cannot write ends the hold
too."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from omni_grpc.bench.grpc_load import append, mirror_settings
from omni_grpc.core import Limits
from omni_grpc.server.local import LocalService, LocalStream
from omni_grpc.server.send_queue import SendQueue
from omni_grpc.wire import pb
from tests.serving import serving

OPEN = pb.ConverseRequest(open_session=pb.OpenSession())
CHUNK = b"\1\0" * 480  # 20 ms of pcm16 at 24 kHz


class Written:
    def __init__(self) -> None:
        self.payloads: list[bytes] = []

    async def __call__(self, payload: bytes) -> None:
        self.payloads.append(payload)


async def _opened(stream: LocalStream) -> SendQueue:
    await stream.write(OPEN)
    created = await stream.read()
    assert created is not None and created.WhichOneof("event") == "session_created"
    queue = stream._stream.queue
    assert queue is not None
    await _turns()  # the engine's worker opens its session: its fast path is empty until then
    return queue


async def _turns(count: int = 3) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def _kind(payload: bytes) -> str | None:
    return pb.ConverseResponse.FromString(payload).WhichOneof("event")


async def test_an_echo_the_caller_flushes_schedules_no_wake_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serving(mirror_settings()) as running:
        stream = LocalService(running.sessions).converse()
        queue = await _opened(stream)
        pump = asyncio.create_task(stream.read_serialized())
        await _turns()  # the reading task sleeps on the empty queue
        loop = asyncio.get_running_loop()
        wake_ups: list[object] = []
        call_soon = loop.call_soon

        def counted(callback: Any, *args: Any, **kwargs: Any) -> asyncio.Handle:
            if callback == queue._wake:
                wake_ups.append(callback)
            return call_soon(callback, *args, **kwargs)

        written = Written()
        with monkeypatch.context() as patch:
            patch.setattr(loop, "call_soon", counted)
            for seq in (1, 2, 3):
                await stream.write(append(seq, CHUNK), flush_follows=True)
                await stream.flush(written)
                await _turns()
        deltas = [payload for payload in written.payloads if _kind(payload) == "output_audio_delta"]
        assert len(deltas) == 3  # each echo went out through the flush
        assert wake_ups == []  # none was even scheduled for the reading task
        assert not pump.done() and not queue.reader_flushes
        # Without the hold (a write nobody flushes), the reading task takes the echo.
        await stream.write(append(4, CHUNK))
        payload = await asyncio.wait_for(pump, 5)
        assert payload is not None and _kind(payload) == "output_audio_delta"
        stream.cancel()


async def test_a_refusal_for_rate_reaches_the_reading_task_while_the_writer_is_held() -> None:
    # A bucket of 20 commands that refills one a second: the 21st, sent at once, is refused.
    limits = Limits(disconnect_grace_s=5.0, session_commands_per_s=1.0, rate_burst_s=20.0)
    settings = dataclasses.replace(mirror_settings(), limits=limits)
    async with serving(settings) as running:
        stream = LocalService(running.sessions).converse()
        await _opened(stream)
        written = Written()
        for seq in range(1, 21):  # the bucket holds 20 commands
            await stream.write(append(seq, CHUNK), flush_follows=True)
            await stream.flush(written)
        sent = len(written.payloads)
        assert sent >= 20  # the echoes (and the response's start) went out through the flush
        pump = asyncio.create_task(stream.read_serialized())
        refused = asyncio.create_task(stream.write(append(21, CHUNK), flush_follows=True))
        payload = await asyncio.wait_for(pump, 5)
        assert not refused.done()  # the writer is still held back by the retry hint
        assert payload is not None
        error = pb.ConverseResponse.FromString(payload).error
        assert (error.code, error.client_seq) == ("rate_limit_exceeded", 21)
        await asyncio.wait_for(refused, 5)
        await stream.flush(written)
        assert len(written.payloads) == sent  # nothing was left for the flush
        stream.cancel()


async def test_a_flush_after_the_stream_was_cancelled_ends_the_hold() -> None:
    async with serving(mirror_settings()) as running:
        stream = LocalService(running.sessions).converse()
        queue = await _opened(stream)
        queue.reader_flushes = True  # as a write with flush_follows leaves it
        stream.cancel()
        await stream.flush(Written())
        assert not queue.reader_flushes
