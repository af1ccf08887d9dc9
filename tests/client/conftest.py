"""A chaos proxy in front of the shared ``server`` (tests/conftest.py), and helpers, for client
tests."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest

from omni_grpc.client import ClientOptions, DuplexClient, ReconnectPolicy
from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from tests.client.proxy import ChaosProxy
from tests.serving import settings as settings  # the client tests start servers with it

RATE_HZ = 16000
EVENT_TIMEOUT_S = 10.0
# Input as 16 kHz pcm16, so the loopback engine's canonical input needs no resampling and
# committed durations are exact.
CONFIG = pb.SessionConfig(
    input_audio_format=pb.AudioFormat(encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=RATE_HZ)
)
# Quick, repeatable reconnects for tests.
OPTIONS = ClientOptions(
    reconnect=ReconnectPolicy(
        initial_backoff_s=0.02, max_backoff_s=0.2, max_attempts=30, max_elapsed_s=10.0
    ),
    seed=1234,
)


def tone(ms: int, *, rate_hz: int = RATE_HZ, freq_hz: float = 440.0) -> bytes:
    """``ms`` milliseconds of a sine as mono pcm16."""
    t = np.arange(rate_hz * ms // 1000) / rate_hz
    return (0.3 * 32767 * np.sin(2 * math.pi * freq_hz * t)).astype("<i2").tobytes()


def kinds(events: list[pb.ConverseResponse]) -> list[str]:
    return [str(event.WhichOneof("event")) for event in events]


async def collect_until(
    client: DuplexClient, kind: str, *, into: list[pb.ConverseResponse] | None = None
) -> list[pb.ConverseResponse]:
    """Takes events up to and including the first of ``kind`` (fails after a timeout)."""
    events = [] if into is None else into
    stream = client.events()
    async with asyncio.timeout(EVENT_TIMEOUT_S):
        async for event in stream:
            events.append(event)
            if event.WhichOneof("event") == kind:
                break
    await stream.aclose()
    return events


def assert_contiguous(events: list[pb.ConverseResponse], first: int = 1) -> None:
    """Journaled seqs run first, first+1, … with no gap and no repeat."""
    seqs = [event.seq for event in events if event.seq]
    assert seqs == list(range(first, first + len(seqs))), seqs


async def eventually(condition: Callable[[], bool], *, timeout_s: float = 5.0) -> None:
    """Waits until ``condition()`` holds (state on the server side that has no event)."""
    async with asyncio.timeout(timeout_s):
        while True:
            if condition():
                return
            await asyncio.sleep(0.02)


def journal_length(server: RunningServer, session_id: str) -> int:
    """How many events the server still keeps for a session (acks shrink it)."""
    session = next(s for s in server.registry if s.id == session_id)
    return len(session.journal)


@pytest.fixture
async def proxy(server: RunningServer) -> AsyncIterator[ChaosProxy]:
    async with ChaosProxy("127.0.0.1", server.grpc_port, seed=99) as chaos:
        yield chaos
