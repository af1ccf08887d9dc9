"""The host's synchronous way in (``SessionHost.receive_now``): a command whose engine commands
the engine takes at once (the usual chunk, on an engine's fast path) is carried out to its end
with no coroutine of the host's, its events queued before it returns; one the engine makes
wait returns the rest as a coroutine, which hands the commands on in order, tells the taps of
each once, and returns the reader's pause as ``receive`` does."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from dataclasses import replace

from omni_grpc.core.commands import AppendAudio, EngineCommand
from omni_grpc.engine.base import EngineSession
from omni_grpc.server.host import SessionHost
from omni_grpc.server.taps import HostTap
from omni_grpc.server.taps import SessionHost as TappedHost
from omni_grpc.wire import pb
from tests.core.helpers import ENGINE, append, open_session

CHUNK = b"\1\0" * 480
# Every rate native, as the loopback mirror's: an append goes to the engine as it came.
NATIVE = replace(ENGINE, native_input_rates_hz=(8000, 16000, 24000, 48000))


class Mirror(EngineSession):
    """Takes an append at once and says it back (as the loopback mirror's fast path does);
    with ``queueing`` set, takes nothing at once: everything waits for :attr:`room`."""

    def __init__(self, queueing: bool = False) -> None:
        self.queueing = queueing
        self.room = asyncio.Event()
        self.taken: list[EngineCommand] = []

    async def submit(self, command: EngineCommand) -> None:
        await self.room.wait()
        self.taken.append(command)

    def submit_now(self, command: EngineCommand) -> list[pb.ConverseResponse] | None:
        if self.queueing or not isinstance(command, AppendAudio):
            return None
        self.taken.append(command)
        delta = pb.OutputAudioDelta(audio=command.audio)
        return [pb.ConverseResponse(output_audio_delta=delta)]

    async def events(self) -> AsyncIterator[pb.ConverseResponse]:
        await asyncio.Event().wait()
        yield pb.ConverseResponse()

    async def close(self) -> None:
        pass


class Handed(HostTap):
    __slots__ = ("seqs",)

    def __init__(self) -> None:
        self.seqs: list[int] = []

    def handed(self, host: TappedHost, command: EngineCommand) -> None:
        self.seqs.append(command.client_seq)


def _host(engine: Mirror) -> tuple[SessionHost, int]:
    session = open_session(engine=NATIVE).session
    host = SessionHost(session, engine, lambda _: None, lambda: 1.0)
    host.attach(session.generation)
    return host, session.generation


async def test_a_chunk_the_engine_takes_at_once_needs_no_coroutine() -> None:
    engine = Mirror()
    host, generation = _host(engine)
    queue = host._queues[generation]
    for seq in (1, 2, 3):
        done = host.receive_now(generation, append(seq, CHUNK), 0)
        assert done == 0.0 and not inspect.isawaitable(done)  # carried out already
        assert [command.client_seq for command in engine.taken] == list(range(1, seq + 1))
        assert len(queue) == seq  # its echo is queued, for the reader's flush
    await host.abandon()


async def test_a_command_the_engine_makes_wait_returns_the_rest_in_order() -> None:
    engine = Mirror(queueing=True)
    host, generation = _host(engine)
    tap = Handed()
    host.taps.add(tap)
    rest = host.receive_now(generation, append(1, CHUNK), 0)
    assert inspect.isawaitable(rest)
    assert engine.taken == [] and tap.seqs == [1]  # told once, when the fast path was asked
    waiting = asyncio.ensure_future(rest)
    await asyncio.sleep(0)
    assert not waiting.done()  # in the mailbox's wait, as ``receive`` would be
    engine.room.set()
    assert await asyncio.wait_for(waiting, 5) == 0.0
    assert [command.client_seq for command in engine.taken] == [1]
    assert tap.seqs == [1]  # not told again when the mailbox took it
    # And ``receive`` awaits the same to its end.
    assert await asyncio.wait_for(host.receive(generation, append(2, CHUNK), 0), 5) == 0.0
    assert [command.client_seq for command in engine.taken] == [1, 2] and tap.seqs == [1, 2]
    await host.abandon()
