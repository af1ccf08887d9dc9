"""What every engine must do at the seam, and the tools to drive one directly (no server).

An :class:`EngineSpec` says how to build an engine for tests; :class:`Probe` drives one of its
sessions: it numbers commands like the core does, reads events on a task of its own (so a
timed-out read never breaks the engine's event stream) and keeps everything it saw.
:func:`check_lifecycles` holds the response rules that hold for any engine. :class:`ScheduleClock`
is a kit clock on which waiting costs nothing, for reading a paced engine's schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from omni_grpc import audio
from omni_grpc.core.commands import engine_command
from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import Limits
from omni_grpc.engine.base import Engine, EngineSession
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT, CANONICAL_OUTPUT

IN_RATE = CANONICAL_INPUT.sample_rate_hz
OUT_RATE = CANONICAL_OUTPUT.sample_rate_hz
RESPONSE_OUTPUT = frozenset(
    {
        "output_audio_delta",
        "output_audio_transcript_delta",
        "output_text_delta",
        "response_speak",
        "function_call_arguments_delta",
        "function_call_arguments_done",
    }
)


class ScheduleClock:
    """A kit clock (:class:`omni_grpc.engine.kit.Clock`) on which waiting costs nothing: each
    sleep moves time on by its length at once, and is kept in :attr:`sleeps`.

    A session paced on it keeps its schedule exactly however fast the machine runs, so a test
    reads what the session decided (when each chunk was due, how long its turn took) rather
    than how long a loaded machine took. It serves one paced session at a time: two sleeping at
    once would each move the other's time on.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self._now += max(0.0, seconds)
        await asyncio.sleep(0)  # others run between two chunks, as they would in real time

    def advance(self, seconds: float) -> None:
        """Time passes with nobody asleep (a reader away, say)."""
        self._now += seconds


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """How the suite gets an engine: ``make`` builds one that has not been started."""

    name: str
    make: Callable[[], Engine]
    timeout_s: float = 5.0  # the longest wait for any one event
    # The clock ``make``'s engines pace and time on, when it is a test's: then how long an
    # engine took is read on it (what the engine decided), not on the wall clock.
    clock: ScheduleClock | None = None

    def __str__(self) -> str:
        return self.name


def voice_like(seconds: float, f0_hz: float = 140.0) -> bytes:
    """Canonical input that looks like voiced speech: a pitch with harmonics and a syllable
    envelope, at a speaking level (about -20 dBFS)."""
    t = np.arange(int(IN_RATE * seconds)) / IN_RATE
    harmonics = sum(np.sin(2 * np.pi * f0_hz * k * t) / k for k in range(1, 8))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t)  # ~4 syllables a second
    samples = (0.12 * harmonics * envelope).astype(np.float32)
    return audio.encode(samples, pb.AUDIO_ENCODING_PCM16, IN_RATE)


def default_config(engine: Engine) -> pb.SessionConfig:
    """The configuration the core would hand an engine for an empty open_session."""
    return resolve_config(pb.SessionConfig(), Limits(), engine.features)


class Probe:
    """Drives one engine session and records its events."""

    _END = object()

    def __init__(
        self, session: EngineSession, timeout_s: float, clock: ScheduleClock | None = None
    ) -> None:
        self.session = session
        self.timeout_s = timeout_s
        self.now = clock.now if clock else time.monotonic  # the engine's clock
        self.seen: list[pb.ConverseResponse] = []
        self.failure: BaseException | None = None
        self.delivered = 0  # events the session's stream has yielded so far
        self._client_seq = 0
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._pump = asyncio.create_task(self._read(), name=f"probe-{id(session)}")

    async def _read(self) -> None:
        try:
            async for event in self.session.events():
                self.delivered += 1
                self._queue.put_nowait(event)
        except Exception as error:  # kept for the test to assert on
            self.failure = error
        finally:
            self._queue.put_nowait(self._END)

    async def send(self, **command: object) -> int:
        """Submits one numbered command, e.g. ``send(barge_in=pb.BargeIn())``; returns its seq."""
        self._client_seq += 1
        request = pb.ConverseRequest(client_seq=self._client_seq, **command)  # type: ignore[arg-type]
        await self.session.submit(engine_command(request))
        return self._client_seq

    async def append(self, pcm16: bytes, chunk_ms: int = 20) -> None:
        """Appends canonical audio in chunks of ``chunk_ms``, as a client streams it."""
        for chunk in audio.chunk_pcm16(pcm16, IN_RATE * chunk_ms // 1000 * 2):
            await self.send(append_input_audio=pb.AppendInputAudio(audio=chunk))

    async def next(self, timeout_s: float | None = None) -> pb.ConverseResponse:
        """The next event; fails the test on a timeout or the end of the stream."""
        item = await asyncio.wait_for(self._queue.get(), timeout_s or self.timeout_s)
        if item is self._END:
            self._queue.put_nowait(self._END)
            raise AssertionError(f"the event stream ended (failure: {self.failure!r})")
        assert isinstance(item, pb.ConverseResponse)
        self.seen.append(item)
        return item

    async def until(
        self, kind: str, where: Callable[[pb.ConverseResponse], bool] = lambda _: True
    ) -> list[pb.ConverseResponse]:
        """Events up to and including the first ``kind`` event that satisfies ``where``."""
        got = []
        while True:
            event = await self.next()
            got.append(event)
            if event.WhichOneof("event") == kind and where(event):
                return got

    async def quiet(self, seconds: float) -> list[pb.ConverseResponse]:
        """Whatever arrives within ``seconds`` (a test that expects silence asserts it empty)."""
        got = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while True:
                    got.append(await self.next(timeout_s=seconds + 1))
        return got

    async def stream_end(self) -> None:
        """Waits for the session's event stream to end (it must, once the session is closed)."""
        await asyncio.wait_for(asyncio.shield(self._pump), self.timeout_s)

    async def close(self) -> None:
        """Closes the session and waits for the reader to stop."""
        await self.session.close()
        await asyncio.wait_for(asyncio.shield(self._pump), self.timeout_s)


async def open_probe(engine: Engine, spec: EngineSpec, session_id: str = "s1") -> Probe:
    """Opens a session with the default configuration and starts reading it."""
    session = await engine.open_session(session_id, default_config(engine))
    return Probe(session, spec.timeout_s, spec.clock)


def kinds(events: list[pb.ConverseResponse]) -> list[str]:
    """The event kinds, in order."""
    return [str(event.WhichOneof("event")) for event in events]


def response_of(event: pb.ConverseResponse) -> str:
    """The response id an event belongs to, or "" for events of no response."""
    kind = event.WhichOneof("event")
    if kind in RESPONSE_OUTPUT:
        return str(getattr(event, kind).response_id)
    if kind == "response_created":
        return event.response_created.response.id
    if kind == "response_done":
        return event.response_done.response.id
    if kind in ("item_added", "item_done"):  # a function call's item names its response
        return str(getattr(event, kind).response_id)
    return ""


def check_lifecycles(events: list[pb.ConverseResponse]) -> dict[str, list[pb.ConverseResponse]]:
    """Asserts the response rules; returns each response's events, created to done.

    Every response starts with one ``response_created``, has its output only after that,
    ends with exactly one ``response_done``, and nothing of it follows the done. Audio deltas
    are canonical output and follow each other without gaps on the response's media clock.
    """
    by_response: dict[str, list[pb.ConverseResponse]] = {}
    for event in events:
        rid = response_of(event)
        if not rid:
            continue
        kind = event.WhichOneof("event")
        seen = by_response.setdefault(rid, [])
        if kind == "response_created":
            assert not seen, f"{rid}: response_created after {kinds(seen)}"
        else:
            assert seen and seen[0].HasField("response_created"), f"{rid}: {kind} before created"
            assert not seen[-1].HasField("response_done"), f"{rid}: {kind} after response_done"
        seen.append(event)
    for rid, seen in by_response.items():
        assert seen[-1].HasField("response_done"), f"{rid} never ended: {kinds(seen)}"
        clock = 0.0
        for event in seen:
            if event.HasField("output_audio_delta"):
                delta = event.output_audio_delta
                assert (delta.encoding, delta.sample_rate_hz) == (
                    CANONICAL_OUTPUT.encoding,
                    OUT_RATE,
                )
                assert abs(delta.start_ms - clock) < 1e-6, f"{rid}: gap at {delta.start_ms} ms"
                assert abs(delta.duration_ms - len(delta.audio) / 2 * 1000 / OUT_RATE) < 1e-6
                clock += delta.duration_ms
    return by_response


def audio_ms(events: list[pb.ConverseResponse]) -> float:
    """The total length of the audio deltas among ``events``."""
    return sum(e.output_audio_delta.duration_ms for e in events if e.HasField("output_audio_delta"))


def transcript(events: list[pb.ConverseResponse]) -> str:
    """The transcript deltas among ``events``, joined."""
    return "".join(
        e.output_audio_transcript_delta.delta
        for e in events
        if e.HasField("output_audio_transcript_delta")
    )


async def run_turn(probe: Probe, seconds: float) -> list[pb.ConverseResponse]:
    """Appends ``seconds`` of speech, commits, and returns the events up to the response's end."""
    await probe.append(voice_like(seconds))
    await probe.send(commit_input_audio=pb.CommitInputAudio())
    return await probe.until("response_done")


async def cancel_mid_response(
    probe: Probe, cancel: Callable[[], Awaitable[int]]
) -> tuple[list[pb.ConverseResponse], pb.Response, float]:
    """Starts a long answer and cancels it after its first audio.

    Returns the answer's events, its done, and the seconds from the cancel to the done, on the
    engine's clock (:attr:`Probe.now`).
    """
    await probe.append(voice_like(20.0), chunk_ms=200)
    await probe.send(commit_input_audio=pb.CommitInputAudio())
    before = await probe.until("output_audio_delta")
    cancelled_at = probe.now()
    await cancel()
    rest = await probe.until("response_done")
    return before + rest, rest[-1].response_done.response, probe.now() - cancelled_at
