"""The browser page in headless Chromium: a spoken turn, its reply played and acknowledged.

Chromium's fake microphone plays a speech WAV made with espeak-ng; the page captures it with an
AudioWorklet, decides the end of the turn itself (the loopback has no server VAD), and plays
the reply through its jitter buffer. Mid-reply the test drops the page's socket: the page must
resume the session and finish the reply with no audio missing or doubled. A screenshot of the
page goes to the test artifacts (``build/test-artifacts``, or ``$OMNI_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from bridge_testkit import SPEECH_TEXT, running_bridge, service_settings
from playwright.async_api import Page, async_playwright

from omni_grpc.server.app import RunningServer, start_server

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"  # Debian's package; browser downloads do not work here
ARTIFACTS = Path(os.environ.get("OMNI_TEST_ARTIFACTS", "build/test-artifacts"))


def mic_wav(folder: Path) -> Path:
    """Half a second of silence, the speech, then 2.5 s of silence, at 48 kHz."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)  # and a place for the screenshot
    raw, wav = folder / "speech_raw.wav", folder / "mic.wav"
    subprocess.run(
        ["espeak-ng", "-v", "en-us", "-s", "170", "-w", str(raw), SPEECH_TEXT],
        check=True,
        timeout=30,
    )
    subprocess.run(
        ["sox", str(raw), "-r", "48000", "-c", "1", "-b", "16", str(wav), "pad", "0.5", "2.5"],
        check=True,
        timeout=30,
    )
    return wav


@pytest.fixture
async def paced_service() -> AsyncIterator[RunningServer]:
    running = await start_server(service_settings(engine_options={"pace": "realtime"}))
    yield running
    await running.stop()


async def wait_until(page: Page, condition: str, timeout_s: float) -> Any:
    """Waits for a JavaScript condition on ``window.omni``; returns its value."""
    handle = await page.wait_for_function(condition, timeout=timeout_s * 1000, polling=50)
    return await handle.json_value()


async def test_page_talks_plays_acks_and_resumes(
    paced_service: RunningServer, tmp_path: Path
) -> None:
    assert shutil.which(CHROMIUM), "the browser tests need Debian's chromium package"
    wav = mic_wav(tmp_path)
    flags = [
        "--disable-gpu",
        "--disable-quic",
        "--autoplay-policy=no-user-gesture-required",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
    ]
    async with running_bridge(paced_service.target) as port, async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, args=flags)
        try:
            page = await browser.new_page()
            page_errors: list[str] = []
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            await page.goto(f"http://127.0.0.1:{port}/")
            await page.click("#start")
            # The turn: speech, then the page's own end-of-turn commit, then the reply.
            rid = await wait_until(
                page,
                """() => Object.entries(omni.responses)
                .filter(([, r]) => r.audioMs >= 600 && !r.done).map(([id]) => id)[0]""",
                20,
            )
            await page.evaluate("omni.dropSocket()")
            await wait_until(
                page,
                f"""() => {{
                const r = omni.responses["{rid}"], ack = omni.acked["{rid}"];
                return omni.resumes === 1 && r.done && r.playedMs >= r.audioMs - 0.5
                    && ack && ack.played_ms >= r.audioMs - 0.5; }}""",
                20,
            )
            state = await page.evaluate("omni")
            await page.screenshot(path=str(ARTIFACTS / "bridge_page.png"), full_page=True)
            table = await page.inner_text("#turns")
        finally:
            await browser.close()

    assert not page_errors and not state["errors"], (page_errors, state["errors"])
    assert state["status"] == "live" and state["resumes"] == 1 and state["clientTurns"]
    reply = state["responses"][rid]
    assert reply["status"] == "completed"
    # What was said comes back: the whole turn, half a second of lead-in and the speech.
    assert reply["audioMs"] > 2000, reply["audioMs"]
    # Across the drop, the deltas tile the reply's media clock: nothing missing, nothing twice.
    deltas = reply["deltas"]
    assert deltas[0][0] == 0
    for (start, duration), (next_start, _) in itertools.pairwise(deltas):
        assert next_start == pytest.approx(start + duration)
    assert sum(duration for _, duration in deltas) == pytest.approx(reply["audioMs"])
    # Played to the end, and the service confirmed the played time.
    assert reply["playedMs"] == pytest.approx(reply["audioMs"], abs=0.5)
    assert state["acked"][rid]["played_ms"] == pytest.approx(reply["audioMs"], abs=0.5)
    assert reply["transcript"].startswith("you said")
    assert reply["clientLatencyMs"] is not None and reply["serverLatencyMs"] is not None
    assert rid[-8:] in table and "completed" in table
    assert (ARTIFACTS / "bridge_page.png").stat().st_size > 10_000


async def test_page_is_served(paced_service: RunningServer) -> None:
    async with (
        running_bridge(paced_service.target) as port,
        asyncio.timeout(10),
        aiohttp.ClientSession() as http,
    ):
        for path, kind in (
            ("/", "text/html"),
            ("/static/app.js", "javascript"),
            ("/static/worklet.js", "javascript"),
        ):
            async with http.get(f"http://127.0.0.1:{port}{path}") as response:
                assert response.status == 200 and kind in response.content_type, path
