#!/usr/bin/env python3
"""End of speech to first audio as a person on the bridge's own page gets it, in Chromium.

    .venv/bin/python scripts/bench_page.py [--part tuning|held-out|all] [--per-kind N]
                                           [--carrier webrtc|websocket] [--target HOST:PORT]
                                           [--engine-option KEY=VALUE ...]

Each complete request of the turn-taking set (scripts/turn_set.py) is played by Chromium's
fake microphone into a fresh page of its own (a session of its own, as in
scripts/bench_turns.py), which opens its session with the page's own settings (semantic end of
turn, eagerness auto) on its default carrier (WebRTC) or ``--carrier``. What is read is the
page's own figure, the "turn end -> first audio" column of its turns table: from the moment
the microphone captured the end of the speech (``speech_stopped``'s ``audio_end_ms`` on the
page's input clock) to the first audio of the answer reaching the page (on a call,
``output_audio_buffer.started``; on a websocket, the first audio delta). The browser's jitter
buffer and the loudspeaker add some tens of ms that no page can see.

The service is the default engine, started in a child process with ``omni-grpc serve`` (its
bridge serves the page) unless ``--target`` names a running bridge. The figures depend on the
machine and its load: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import make_test_speech as speech
import numpy as np
from bench_turns import START_TIMEOUT_S, start_service
from playwright.async_api import ConsoleMessage, async_playwright
from turn_set import PARTS, dialogues

LEAD_MS = 2000.0  # silence before the request: the page connects while the microphone runs
TAIL_MS = 6000.0  # silence after it: the longest wait at auto is 4 s
ANSWER_TIMEOUT_S = 30.0
# The latency of the first response that has one, and what the page said went wrong.
FIRST_LATENCY = """() => {
  const r = Object.values(omni.responses).find((r) => r.clientLatencyMs !== null);
  return r ? r.clientLatencyMs : null;
}"""


@dataclass(frozen=True, slots=True)
class Heard:
    name: str
    latency_ms: float | None  # None: no answer within ANSWER_TIMEOUT_S
    problems: tuple[str, ...]


def microphone_wav(folder: Path, name: str, signal: np.ndarray) -> Path:
    """The request between silences, as a 48 kHz WAV that Chromium's fake microphone plays."""
    source, wav = folder / f"{name}.16k.wav", folder / f"{name}.wav"
    lead, tail = speech.silence(LEAD_MS), speech.silence(TAIL_MS)
    speech.write_wav(source, np.concatenate([lead, signal, tail]))
    subprocess.run(["sox", str(source), "-r", "48000", str(wav)], check=True, timeout=30)
    return wav


async def hear(base_url: str, carrier: str, name: str, microphone: Path) -> Heard:
    """One request through a fresh page: the page's latency of its answer."""
    chromium = shutil.which("chromium")
    assert chromium, "the page benchmark needs Debian's chromium package"
    flags = [
        "--disable-gpu",
        "--autoplay-policy=no-user-gesture-required",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone}%noloop",
    ]
    problems: list[str] = []
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium, args=flags)
        try:
            page = await browser.new_page()

            def console(message: ConsoleMessage) -> None:
                if message.type == "error":
                    problems.append(f"console: {message.text}")

            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("console", console)
            await page.goto(f"{base_url}/?carrier={carrier}")
            await page.click("#start")
            latency = None
            try:
                handle = await page.wait_for_function(
                    FIRST_LATENCY, timeout=ANSWER_TIMEOUT_S * 1000, polling=50
                )
                latency = float(await handle.json_value())
            except Exception as error:  # no answer in time: counted as such
                problems.append(f"no answer: {type(error).__name__}")
            problems += [str(e) for e in await page.evaluate("omni.errors")]
        finally:
            await browser.close()
    return Heard(name, latency, tuple(problems))


async def reachable(base_url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    async with aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(f"{base_url}/") as answer:
                    if answer.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"the bridge at {base_url} did not answer")
            await asyncio.sleep(0.5)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def run(args: argparse.Namespace) -> int:
    service = None
    target = args.target
    if target is None:
        service, target = start_service(args.engine_option, "bridge")
    base_url = f"http://{target}"
    load = os.getloadavg()[0]
    try:
        await reachable(base_url)
        heard = []
        with tempfile.TemporaryDirectory() as folder:
            requests = [d for d in dialogues(args.per_kind, args.part) if d.kind == "complete"]
            for index, dialogue in enumerate(requests):
                wav = microphone_wav(Path(folder), f"request{index}", dialogue.before.signal)
                one = await hear(base_url, args.carrier, dialogue.name, wav)
                shown = "no answer" if one.latency_ms is None else f"{one.latency_ms:.0f} ms"
                print(f"  {dialogue.name}: {shown} {list(one.problems) or ''}", file=sys.stderr)
                heard.append(one)
    finally:
        if service is not None:
            service.terminate()
            service.wait(timeout=30)
    answered = [one.latency_ms for one in heard if one.latency_ms is not None]
    print(f"\nthe page in Chromium ({args.carrier}), the {args.part} part's complete requests\n")
    print(
        "| requests | answered | turn end -> first audio, median / p90 ms | pages with problems |"
    )
    print("| --- | --- | --- | --- |")
    figure = "— / —"
    if answered:
        figure = f"{statistics.median(answered):.0f} / {percentile(answered, 0.9):.0f}"
    troubled = sum(1 for one in heard if one.problems)
    print(f"| {len(heard)} | {len(answered)} | {figure} | {troubled} |")
    print(f"\nload average {load:.1f} before, {os.getloadavg()[0]:.1f} after (1 min)")
    return 0 if len(answered) == len(heard) and not troubled else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=PARTS, default="all")
    parser.add_argument("--per-kind", type=int, default=None)
    parser.add_argument("--carrier", choices=("webrtc", "websocket"), default="webrtc")
    parser.add_argument("--target", help="a running bridge, HOST:PORT")
    parser.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
