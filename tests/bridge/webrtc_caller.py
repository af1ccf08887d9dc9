"""A WebRTC caller in Python (aiortc), as a test uses one: OpenAI's call flow, nothing else.

It offers what the stock browser client offers (an Opus track from its microphone, here a
pcm16 recording played in real time, and an ``oai-events`` data channel), posts the offer to
``/v1/realtime/calls``, and keeps every event of the channel and every sample of the answer's
track (resampled to pcm16 mono at 24 kHz) as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from fractions import Fraction
from typing import Any

import aiohttp
import av
import numpy as np
import orjson
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

RATE = 24000
FRAME = RATE // 50  # 20 ms


class Microphone(MediaStreamTrack):
    """pcm16 mono at 24 kHz played in real time, 20 ms a frame; silence when none waits."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._pending = bytearray()
        self._start: float | None = None
        self._timestamp = 0
        self.spoken = asyncio.Event()  # set when what was said has all left

    def say(self, pcm: bytes) -> None:
        self.spoken.clear()
        self._pending += pcm

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        wait_s = self._start + self._timestamp / RATE - time.monotonic()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        chunk = bytes(self._pending[: FRAME * 2])
        del self._pending[: FRAME * 2]
        if not self._pending:
            self.spoken.set()
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(chunk + bytes(FRAME * 2 - len(chunk)))
        frame.pts, frame.sample_rate, frame.time_base = self._timestamp, RATE, Fraction(1, RATE)
        self._timestamp += FRAME
        return frame


class Refused(Exception):
    """The bridge answered the offer with an HTTP error."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"{status}: {body!r}")
        self.status = status
        self.body = body


class Caller:
    """One call to the bridge: its peer connection, channel, events and heard audio."""

    def __init__(self) -> None:
        self.peer = RTCPeerConnection()
        self.microphone = Microphone()
        self.peer.addTrack(self.microphone)
        self.channel = self.peer.createDataChannel("oai-events")
        self.events: list[dict[str, Any]] = []
        self._arrived = asyncio.Condition()
        self.heard = bytearray()  # the answer's track, pcm16 mono 24 kHz
        self.call_id = ""
        self._tasks: list[asyncio.Task[None]] = []
        self.channel.on("message", self._message)
        self.peer.on("track", self._track)

    def _message(self, text: str) -> None:
        self.events.append(orjson.loads(text))
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._arrived:
            self._arrived.notify_all()

    def _track(self, track: MediaStreamTrack) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(self._listen(track)))

    async def _listen(self, track: MediaStreamTrack) -> None:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            for out in resampler.resample(frame):
                self.heard += bytes(out.planes[0])[: out.samples * 2]

    async def call(
        self, url: str, headers: Mapping[str, str] | None = None, *, offer_sdp: str | None = None
    ) -> None:
        """Posts the offer; raises Refused for an HTTP error, else waits for the channel."""
        await self.peer.setLocalDescription(await self.peer.createOffer())
        sdp = offer_sdp if offer_sdp is not None else self.peer.localDescription.sdp
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                url, data=sdp, headers={"Content-Type": "application/sdp", **(headers or {})}
            ) as answer,
        ):
            body = await answer.read()
            if answer.status != 201:
                raise Refused(answer.status, body)
            assert answer.content_type == "application/sdp"
            self.call_id = answer.headers["Location"].rsplit("/", 1)[-1]
        await self.peer.setRemoteDescription(RTCSessionDescription(body.decode(), "answer"))
        opened = asyncio.Event()
        if self.channel.readyState == "open":
            opened.set()
        self.channel.on("open", opened.set)
        await asyncio.wait_for(opened.wait(), 20)

    def send(self, event: dict[str, Any]) -> None:
        self.channel.send(orjson.dumps(event).decode())

    async def until(self, kind: str, *, after: int = 0, wait_s: float = 30) -> dict[str, Any]:
        """The first event of ``kind`` at or after index ``after``, waiting for it."""

        def found() -> dict[str, Any] | None:
            return next((e for e in self.events[after:] if e["type"] == kind), None)

        try:
            async with asyncio.timeout(wait_s), self._arrived:
                await self._arrived.wait_for(lambda: found() is not None)
        except TimeoutError:
            raise AssertionError(f"no {kind} after {after}: {self.events}") from None
        event = found()
        assert event is not None
        return event

    def types(self) -> list[str]:
        return [event["type"] for event in self.events]

    async def close(self) -> None:
        await self.peer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def calling(
    port: int, query: str = "", headers: Mapping[str, str] | None = None
) -> AsyncIterator[Caller]:
    """A call to the bridge on ``port``, hung up afterwards."""
    caller = Caller()
    try:
        await caller.call(f"http://127.0.0.1:{port}/v1/realtime/calls{query}", headers)
        yield caller
    finally:
        await caller.close()


def voiced_ms(pcm: bytes | bytearray, threshold: float = 200.0) -> int:
    """How many milliseconds of ``pcm`` (pcm16 24 kHz) are louder than ``threshold`` (RMS),
    counted in 20 ms windows."""
    samples = np.frombuffer(bytes(pcm[: len(pcm) // (FRAME * 2) * FRAME * 2]), dtype="<i2")
    windows = samples.reshape(-1, FRAME).astype(np.float64)
    rms = np.sqrt((windows**2).mean(axis=1)) if len(windows) else np.zeros(0)
    return int((rms > threshold).sum()) * 20
