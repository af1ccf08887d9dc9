"""Drives one embedded session directly (no server) and keeps every event it produced."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import soxr
from google.protobuf import struct_pb2

from omni_grpc.core.commands import engine_command
from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import Limits
from omni_grpc.engine.embedded import EmbeddedEngine, EmbeddedSession
from omni_grpc.wire import pb

TIMEOUT_S = 30.0
IN_BYTES_PER_MS = 32


class Driver:
    """Numbers commands like the core, streams audio, and records events as they come."""

    def __init__(self, session: EmbeddedSession) -> None:
        self.session = session
        self.seen: list[pb.ConverseResponse] = []
        self._client_seq = 0
        self._arrived = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self.session.events():
            async with self._arrived:
                self.seen.append(event)
                self._arrived.notify_all()

    async def send(self, **command: object) -> int:
        self._client_seq += 1
        await self.session.submit(
            engine_command(pb.ConverseRequest(client_seq=self._client_seq, **command))
        )  # type: ignore[arg-type]
        return self._client_seq

    async def stream(
        self,
        pcm16: bytes,
        chunk_ms: int = 20,
        *,
        step: bool = False,
        drained: bool = False,
        stop: Callable[[], bool] | None = None,
    ) -> float | None:
        """Appends audio chunk by chunk. With ``step``, waits for the engine after each chunk
        and returns the input clock (ms) at the end of the first chunk after which ``stop()``
        held; the rest of the audio is still sent. With ``drained`` it also waits for the
        engine's background jobs (transcriptions, judgements) after each chunk, as if the
        machine were infinitely fast: what the engine decides is then a function of the
        audio alone."""
        size = chunk_ms * IN_BYTES_PER_MS
        landed = None
        for start in range(0, len(pcm16), size):
            await self.send(
                append_input_audio=pb.AppendInputAudio(audio=pcm16[start : start + size])
            )
            if drained:
                await self.session.drained()
            if step or drained:
                await self.session.idle()
                if landed is None and stop is not None and stop():
                    landed = self.session.input_clock_ms
        return landed

    async def until(
        self,
        kind: str,
        where: Callable[[pb.ConverseResponse], bool] = lambda _: True,
        timeout_s: float = TIMEOUT_S,
    ) -> pb.ConverseResponse:
        """The first event of ``kind`` (seen before or coming) that satisfies ``where``."""
        async with asyncio.timeout(timeout_s), self._arrived:
            while True:
                for event in self.seen:
                    if event.WhichOneof("event") == kind and where(event):
                        return event
                await self._arrived.wait()

    def of(self, kind: str) -> list[pb.ConverseResponse]:
        return [event for event in self.seen if event.WhichOneof("event") == kind]

    def kinds(self) -> list[str]:
        return [str(event.WhichOneof("event")) for event in self.seen]

    async def close(self) -> None:
        await self.session.close()
        await asyncio.wait_for(self._reader, TIMEOUT_S)


async def open_driver(engine: EmbeddedEngine, *, pace: str = "fast", **config: object) -> Driver:
    """A session configured as the core would resolve ``config``, with ``pace``."""
    options = struct_pb2.Struct()
    options.update({"pace": pace})
    requested = pb.SessionConfig(engine_options=options, **config)  # type: ignore[arg-type]
    resolved = resolve_config(requested, Limits(), engine.features)
    session = await engine.open_session("test", resolved)
    return Driver(session)


def response_events(
    events: list[pb.ConverseResponse], response_id: str
) -> list[pb.ConverseResponse]:
    """The events that belong to one response, created to done."""
    found = []
    for event in events:
        kind = event.WhichOneof("event")
        if kind == "response_created":
            rid = event.response_created.response.id
        elif kind == "response_done":
            rid = event.response_done.response.id
        elif kind in ("output_audio_delta", "output_audio_transcript_delta", "output_text_delta"):
            rid = getattr(event, kind).response_id
        else:
            continue
        if rid == response_id:
            found.append(event)
    return found


def spoken(events: list[pb.ConverseResponse]) -> bytes:
    """The output audio among ``events`` (pcm16, 24 kHz)."""
    return b"".join(e.output_audio_delta.audio for e in events if e.HasField("output_audio_delta"))


def said(events: list[pb.ConverseResponse]) -> str:
    return "".join(
        e.output_audio_transcript_delta.delta
        for e in events
        if e.HasField("output_audio_transcript_delta")
    )


def retranscribe(engine: EmbeddedEngine, pcm16_24k: bytes) -> str:
    """What Whisper hears in the engine's own output."""
    samples = np.frombuffer(pcm16_24k, dtype="<i2").astype(np.float32) / 32768.0
    at_16k = soxr.resample(samples, 24000, 16000)
    assert engine.runtime is not None
    return engine.runtime.asr.transcribe((np.clip(at_16k, -1, 1) * 32767).astype("<i2").tobytes())
