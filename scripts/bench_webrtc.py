#!/usr/bin/env python3
"""Benchmark: a WebRTC call against a websocket session carrying the same audio, in one run.

One server, as ``omni-grpc serve`` runs it (bridge and service in one child process), with the
loopback engine in ``mirror`` mode (each chunk of audio in is answered at once with the same
audio out), serves both kinds of session, driven from this process:

* **websocket**: every 20 ms an ``input_audio_buffer.append`` (pcm16 at 24 kHz, base64 JSON);
  each ``response.output_audio.delta`` is matched to its append in order, and the round trip
  timed;
* **webrtc**: an aiortc caller whose microphone track sends 20 ms Opus packets (a 100 ms burst
  of noise every 400 ms, silence between: packets flow all the time, as a browser's do); the
  answer's track is decoded, and the time from a burst leaving the caller's track to its onset
  heard on the answer's track is the round trip (mouth to ear: Opus both ways, the bridge's
  decode, resample, pacing and encode, and the caller's jitter buffer).

Reported, for 1, 4 and 8 sessions of each kind: the server's CPU per session (percent of one
core, from the child process's own CPU time over the window), the ratio WebRTC/websocket, and
the round trip p50/p99 at one session with the difference (what the WebRTC hop adds). The
callers run in this process, so only the server's CPU is counted.

Then, per kind, **sessions per core at p99 added latency < 50 ms**: sessions are added (2, 4,
8, 12, 16, 24, 32, 48) until the round trip's p99 is 50 ms or more above its p99 at one
session; the last count within the bound, the server's CPU it took, and so how many such
sessions one core carries. The callers share the machine with the server (on two cores, a
search may end for the callers' CPU, not the server's: the table says each step's load).

    scripts/bench_webrtc.py            # about two minutes
    scripts/bench_webrtc.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import random
import statistics
import sys
import time
from collections import deque
from fractions import Fraction

import aiohttp
import av
import numpy as np
import orjson

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from omni_grpc.bench import harness
from omni_grpc.bench.grpc_load import mirror_settings

SERVE_CHILD = [sys.executable, os.path.abspath(__file__)]
RATE = 24000
FRAME = RATE // 50  # 20 ms
BURST_EVERY = 20  # frames: a burst every 400 ms
BURST_FRAMES = 5  # 100 ms long
THRESHOLD = 300.0  # RMS of a heard frame that counts as the burst


async def _serve() -> None:
    from omni_cli.config import ServeSettings
    from omni_cli.launch import start_service

    service = await start_service(ServeSettings(server=mirror_settings(), http_port=0))
    harness.announce_ready(service.server.grpc_port, service.http_port or 0)
    await harness.serve_until_parent_gone()
    await service.stop()


# -- websocket sessions ---------------------------------------------------------------------


async def websocket_session(port: int, stop: asyncio.Event, rtts: list[float]) -> None:
    rng = random.Random(1)
    chunk = rng.randbytes(FRAME * 2)
    frame = orjson.dumps(
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()}
    ).decode()
    sent: deque[float] = deque()
    url = f"http://127.0.0.1:{port}/v1/realtime?model=loopback"
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        first = orjson.loads((await ws.receive()).data)
        assert first["type"] == "session.created", first

        async def read() -> None:
            async for message in ws:
                event = orjson.loads(message.data)
                if event["type"] == "response.output_audio.delta" and sent:
                    rtts.append(time.monotonic() - sent.popleft())

        reader = asyncio.create_task(read())
        start = time.monotonic()
        n = 0
        while not stop.is_set():
            sent.append(time.monotonic())
            await ws.send_str(frame)
            n += 1
            await asyncio.sleep(max(start + n * 0.02 - time.monotonic(), 0))
        reader.cancel()


# -- WebRTC callers -------------------------------------------------------------------------


class BurstMicrophone(MediaStreamTrack):
    """20 ms frames in real time: a burst of noise every 400 ms, silence between."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._start: float | None = None
        self._n = 0
        self._noise = (np.random.default_rng(2).normal(0, 6000, FRAME)).astype("<i2").tobytes()
        self.burst_sent: list[float] = []

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        wait_s = self._start + self._n * 0.02 - time.monotonic()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        phase = self._n % BURST_EVERY
        if phase == 0:
            self.burst_sent.append(time.monotonic())
        pcm = self._noise if phase < BURST_FRAMES else bytes(FRAME * 2)
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(pcm)
        frame.pts, frame.sample_rate, frame.time_base = self._n * FRAME, RATE, Fraction(1, RATE)
        self._n += 1
        return frame


async def webrtc_session(port: int, stop: asyncio.Event, rtts: list[float]) -> None:
    peer = RTCPeerConnection()
    microphone = BurstMicrophone()
    peer.addTrack(microphone)
    channel = peer.createDataChannel("oai-events")
    onsets: list[float] = []
    listening: list[asyncio.Task[None]] = []

    async def listen(track: MediaStreamTrack) -> None:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
        loud = False
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            for out in resampler.resample(frame):
                samples = np.frombuffer(bytes(out.planes[0])[: out.samples * 2], "<i2")
                now_loud = float(np.sqrt((samples.astype(np.float64) ** 2).mean())) > THRESHOLD
                if now_loud and not loud:
                    onsets.append(time.monotonic())
                loud = now_loud

    peer.on("track", lambda track: listening.append(asyncio.create_task(listen(track))))
    await peer.setLocalDescription(await peer.createOffer())
    url = f"http://127.0.0.1:{port}/v1/realtime/calls?model=loopback"
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            url,
            data=peer.localDescription.sdp,
            headers={"Content-Type": "application/sdp"},
        ) as answer,
    ):
        assert answer.status == 201, await answer.text()
        sdp = await answer.text()
    await peer.setRemoteDescription(RTCSessionDescription(sdp, "answer"))
    opened = asyncio.Event()
    channel.on("open", opened.set)
    await asyncio.wait_for(opened.wait(), 20)
    await stop.wait()
    # Each burst's onset is the first heard after it left, within one burst period.
    for sent in microphone.burst_sent:
        heard = next((t for t in onsets if sent < t < sent + BURST_EVERY * 0.02), None)
        if heard is not None:
            rtts.append(heard - sent)
    await peer.close()
    for task in listening:
        task.cancel()


# -- the run --------------------------------------------------------------------------------


async def window(
    kind: str, port: int, pid: int, sessions: int, duration_s: float
) -> tuple[float, list[float]]:
    """(server CPU percent of a core per session, round trips in ms) of one window."""
    stop = asyncio.Event()
    rtts: list[float] = []
    session = websocket_session if kind == "websocket" else webrtc_session
    tasks = [asyncio.create_task(session(port, stop, rtts)) for _ in range(sessions)]
    await asyncio.sleep(2.0)  # every session open and flowing
    rtts.clear()
    cpu_before, started = harness.tree_cpu_s(pid), time.monotonic()
    await asyncio.sleep(duration_s)
    cpu = harness.tree_cpu_s(pid) - cpu_before
    elapsed = time.monotonic() - started
    stop.set()
    await asyncio.gather(*tasks)
    await asyncio.sleep(1.0)  # the sessions' ends settle before the next window
    return cpu / elapsed / sessions * 100, [rtt * 1000 for rtt in rtts]


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100)[int(q * 100) - 1] if len(values) > 1 else values[0]


ADDED_P99_MS = 50.0
SEARCH_COUNTS = (2, 4, 8, 12, 16, 24, 32, 48)


async def search(
    kind: str, port: int, pid: int, alone_p99: float, counts: tuple[int, ...], duration_s: float
) -> list[tuple[int, float, float]]:
    """(sessions, server CPU cores in all, round trip p99 ms) for each count tried, in order,
    up to the first whose p99 passes ``alone_p99`` by ``ADDED_P99_MS`` or more."""
    steps = []
    for sessions in counts:
        per_session, rtts = await window(kind, port, pid, sessions, duration_s)
        p99 = quantile(rtts, 0.99)
        steps.append((sessions, per_session * sessions / 100, p99))
        if not rtts or p99 - alone_p99 >= ADDED_P99_MS:
            break
    return steps


def capacity_rows(kind: str, alone_p99: float, steps: list[tuple[int, float, float]]) -> None:
    """Prints one search's steps and what one core carries within the bound."""
    within = [step for step in steps if step[2] - alone_p99 < ADDED_P99_MS]
    for sessions, cores, p99 in steps:
        mark = "" if (sessions, cores, p99) in within else " (over)"
        print(f"| {kind} | {sessions} | {cores:.2f} | {p99:.1f} ({p99 - alone_p99:+.1f}){mark} |")
    if within:
        sessions, cores, _ = within[-1]
        per_core = sessions / cores if cores > 0 else float("inf")
        print(
            f"| {kind}: within {ADDED_P99_MS:.0f} ms | {sessions} | {cores:.2f} | "
            f"{per_core:.0f} per core |"
        )


async def bench(quick: bool) -> int:
    load_before = os.getloadavg()
    child = harness.Child(SERVE_CHILD, "ours")
    _, port = child.ports
    counts = (1, 2) if quick else (1, 4, 8)
    duration_s = 3.0 if quick else 10.0
    rows = []
    latency: dict[str, list[float]] = {}
    try:
        for sessions in counts:
            cpu = {}
            for kind in ("websocket", "webrtc"):
                cpu[kind], rtts = await window(kind, port, child.pid, sessions, duration_s)
                if sessions == 1:
                    latency[kind] = rtts
            rows.append((sessions, cpu["websocket"], cpu["webrtc"]))
        alone = {kind: quantile(latency[kind], 0.99) for kind in latency}
        counts_searched = SEARCH_COUNTS[:2] if quick else SEARCH_COUNTS
        searches = {
            kind: await search(kind, port, child.pid, alone[kind], counts_searched, duration_s)
            for kind in ("websocket", "webrtc")
        }
    finally:
        child.stop()
    print(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print("| sessions | websocket CPU/session | WebRTC CPU/session | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    for sessions, ws, rtc in rows:
        print(f"| {sessions} | {ws:.2f} % | {rtc:.2f} % | {rtc / ws:.1f}x |")
    print()
    print("| round trip, 1 session | p50 ms | p99 ms | samples |")
    print("| --- | ---: | ---: | ---: |")
    for kind in ("websocket", "webrtc"):
        values = latency[kind]
        p50, p99 = quantile(values, 0.5), quantile(values, 0.99)
        print(f"| {kind} | {p50:.1f} | {p99:.1f} | {len(values)} |")
    added = quantile(latency["webrtc"], 0.5) - quantile(latency["websocket"], 0.5)
    print(f"\nthe WebRTC hop adds {added:.1f} ms at p50 (mouth to ear, against append to delta)")
    print()
    print("| search | sessions | server CPU, cores | round trip p99 ms (added to one session's) |")
    print("| --- | ---: | ---: | ---: |")
    for kind, steps in searches.items():
        capacity_rows(kind, alone[kind], steps)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--serve-ours", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_ours:
        return harness.run(_serve())
    return harness.run(bench(args.quick))


if __name__ == "__main__":
    sys.exit(main())
