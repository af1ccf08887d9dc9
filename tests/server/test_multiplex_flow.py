"""Per-stream flow control on ConverseMany, against a real server and port.

Two sessions share one call. One client keeps sending audio and stops reading; the other keeps
echoing. The mirror engine answers every append at once, so the stalled stream's events pile
up in the bridge's link: its buffer stays within its bound, the stream is cut as a Converse
call whose client stops reading is cut (RESOURCE_EXHAUSTED, ``slow_consumer``), its session
resumes with what it missed, and the other session's echoes keep coming back at once.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from omni_grpc.client import multiplex
from omni_grpc.client.channel import ChannelSettings
from omni_grpc.client.multiplex import MultiplexedConnection, MultiplexedStream
from omni_grpc.core import State
from omni_grpc.wire import pb
from omni_grpc.wire.stream_end import StreamBroken
from tests.server.streams import pcm16
from tests.serving import eventually, serving, settings

BOUND = 64 * 1024  # bytes a stream may leave unread; the default (4 MiB) only takes longer
CHUNK = pcm16(100)  # 4.8 kB: the bound holds about a dozen echoes
ECHO_BOUND_S = 0.5  # a generous bound for one echo on a busy shared machine
OPEN = pb.ConverseRequest(open_session=pb.OpenSession())


def _append(seq: int) -> pb.ConverseRequest:
    return pb.ConverseRequest(client_seq=seq, append_input_audio=pb.AppendInputAudio(audio=CHUNK))


async def _opened(stream: MultiplexedStream) -> pb.ConverseResponse:
    await stream.write(OPEN)
    created = await asyncio.wait_for(stream.read(), 10)
    assert created is not None and created.WhichOneof("event") == "session_created"
    return created


async def _echo(stream: MultiplexedStream, seq: int) -> float:
    """Seconds from an append to its echoed audio."""
    started = time.perf_counter()
    await stream.write(_append(seq))
    while True:
        event = await asyncio.wait_for(stream.read(), 10)
        assert event is not None
        if event.WhichOneof("event") == "output_audio_delta":
            return time.perf_counter() - started


async def test_a_stalled_stream_is_bounded_and_cut_and_delays_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(multiplex, "MAX_BUFFERED_BYTES", BOUND)
    mirror = settings(engine_options={"pace": "fast", "mode": "mirror"})
    async with serving(mirror) as running:
        connection = MultiplexedConnection(ChannelSettings(target=running.target), calls=1)
        try:
            stalled, lively = connection.converse(), connection.converse()
            created = await _opened(stalled)
            await _opened(lively)
            assert stalled.call is lively.call  # one call carries both
            [stalled_session] = [
                session
                for session in running.registry
                if session.id == created.session_created.session.id
            ]

            echoes: list[float] = []
            most_buffered = 0
            seq = 0
            # The stalled client sends on and reads nothing; the lively one echoes meanwhile.
            while not stalled.ended and seq < 10 * BOUND // len(CHUNK):
                seq += 1
                await stalled.write(_append(seq))
                most_buffered = max(most_buffered, stalled.buffered_bytes)
                echoes.append(await _echo(lively, len(echoes) + 1))
            sent = seq * len(CHUNK)
            for _ in range(20):  # and after the cut
                echoes.append(await _echo(lively, len(echoes) + 1))

            assert stalled.ended, f"not cut after {sent} bytes of echoes"
            # Cut once its unread echoes passed the bound, not before, and never held more.
            assert BOUND <= sent <= BOUND + 2 * len(CHUNK)
            assert most_buffered <= BOUND
            with pytest.raises(StreamBroken) as cut:
                await stalled.read()
            assert cut.value.status is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert cut.value.code == "slow_consumer"
            assert max(echoes) < ECHO_BOUND_S, sorted(echoes)[-5:]

            # The service was told: the session waits, detached, and resumes with what the
            # client missed.
            await eventually(lambda: stalled_session.state is State.DETACHED)
            again = connection.converse()
            resume = pb.ResumeSession(
                session_id=created.session_created.session.id,
                resume_token=created.session_created.resume_token,
                last_received_seq=created.seq,
            )
            await again.write(pb.ConverseRequest(resume_session=resume))
            resumed = await asyncio.wait_for(again.read(), 10)
            assert resumed is not None and resumed.WhichOneof("event") == "session_resumed"
            # A replay larger than the bound arrives whole: the journal's cap bounds it.
            replayed = resumed.session_resumed.replayed_events
            assert replayed >= seq and replayed * len(CHUNK) > BOUND
            replay = [await asyncio.wait_for(again.read(), 10) for _ in range(replayed)]
            seqs = [event.seq for event in replay if event is not None]
            assert seqs == list(range(created.seq + 1, created.seq + 1 + replayed))
        finally:
            await connection.close()
