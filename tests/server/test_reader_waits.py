"""A stream's reader writes what its command made itself, right after the command (the send
queue's fast path), so while it carries the command out the writer task is not woken for it
(``SendQueue.reader_flushes``). A reader that waits instead, for room in a full engine mailbox,
gives that up first: what the engine says meanwhile reaches the client through the writer task
while the reader still waits, as before the hold."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from omni_grpc.core.commands import EngineCommand
from omni_grpc.engine.base import EngineSession
from omni_grpc.server.host import SessionHost
from omni_grpc.server.stream import ServerStream
from omni_grpc.wire import pb
from tests.core.helpers import append, open_session


class FullMailbox(EngineSession):
    """An engine whose mailbox has no room until :attr:`room` is set; it speaks meanwhile."""

    def __init__(self) -> None:
        self.room = asyncio.Event()
        self.waiting = asyncio.Event()
        self.said: asyncio.Queue[pb.ConverseResponse] = asyncio.Queue()

    async def submit(self, command: EngineCommand) -> None:
        self.waiting.set()
        await self.room.wait()

    def submit_now(self, command: EngineCommand) -> list[pb.ConverseResponse] | None:
        return None  # everything through the mailbox

    async def events(self) -> AsyncIterator[pb.ConverseResponse]:
        while True:
            yield await self.said.get()

    async def close(self) -> None:
        pass


async def test_what_the_engine_says_while_the_reader_waits_reaches_the_writer() -> None:
    session = open_session().session
    engine = FullMailbox()
    host = SessionHost(session, engine, lambda _: None, lambda: 1.0)
    stream = ServerStream(None, "", "test")  # type: ignore[arg-type]  # no refusal here
    stream.host, stream.queue = host, host.attach(session.generation)
    queue = stream.queue
    writer = asyncio.create_task(queue.next())
    written: list[bytes] = []

    async def write(payload: bytes) -> None:
        written.append(payload)

    reader = asyncio.create_task(stream.command(append(1, b"\1\0" * 480), 0, write))
    await asyncio.wait_for(engine.waiting.wait(), 5)  # the reader waits for room
    assert not queue.reader_flushes
    await engine.said.put(pb.ConverseResponse(speech_started=pb.SpeechStarted()))
    payload = await asyncio.wait_for(writer, 5)  # while the reader still waits
    assert not reader.done()
    assert payload is not None
    assert pb.ConverseResponse.FromString(payload).HasField("speech_started")
    engine.room.set()
    assert await asyncio.wait_for(reader, 5) == 0.0
    assert written == []  # the reader found nothing left to write
    await host.abandon()
