"""What the page tests share: Chromium with a fake microphone, and a record of what went wrong.

Chromium's fake microphone plays a WAV file once (``%noloop``), then silence. Every console
error, uncaught page error, failed request and HTTP answer of 400 or more is recorded, so a
test can say that the whole run had none. Screenshots go to the test artifacts
(``build/test-artifacts``, or ``$OMNI_TEST_ARTIFACTS``) and, when ``$OMNI_PAGE_SCREENSHOTS``
names a folder (``OMNI_PAGE_SCREENSHOTS=docs/page``), there too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.async_api import ConsoleMessage, Page, Request, Response, async_playwright
from playwright.async_api import TimeoutError as PlaywrightTimeout

CHROMIUM = "/usr/bin/chromium"  # Debian's package; browser downloads do not work here
ARTIFACTS = Path(os.environ.get("OMNI_TEST_ARTIFACTS", "build/test-artifacts"))
SHOWCASE = os.environ.get("OMNI_PAGE_SCREENSHOTS", "")
VIEWPORT = {"width": 900, "height": 600}
# What a timed-out wait reports of the page: its states, barge-ins, errors and each response.
SUMMARY = """() => ({states: omni.states, bargeIns: omni.bargeIns, errors: omni.errors,
  responses: Object.entries(omni.responses).map(([id, r]) => [id.slice(-8), r.status, r.reason,
    Math.round(r.audioMs), Math.round(r.playedMs), r.done])})"""


def speech_wav(folder: Path, name: str, parts: list[str | float]) -> Path:
    """A 48 kHz WAV of ``parts`` in order: texts spoken by espeak-ng, numbers as seconds of
    silence."""
    pieces = []
    for index, part in enumerate(parts):
        piece = folder / f"{name}_{index}.wav"
        if isinstance(part, str):
            make = ["espeak-ng", "-v", "en-us", "-s", "170", "-w", str(piece), part]
        else:
            make = ["sox", "-n", "-r", "22050", "-c", "1", "-b", "16", str(piece)]
            make += ["trim", "0", str(part)]
        subprocess.run(make, check=True, timeout=30)
        pieces.append(str(piece))
    wav = folder / f"{name}.wav"
    subprocess.run(
        ["sox", *pieces, "-r", "48000", "-c", "1", "-b", "16", str(wav)], check=True, timeout=30
    )
    return wav


@dataclass
class PageRun:
    """A page in Chromium, and everything that went wrong on it."""

    page: Page
    problems: list[str] = field(default_factory=list)

    def watch(self) -> None:
        """Records every problem the page has from now on."""
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("requestfailed", self._failed)
        self.page.on("response", self._answered)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.problems.append(f"console: {message.text}")

    def _failed(self, request: Request) -> None:
        self.problems.append(f"failed: {request.url} {request.failure}")

    def _answered(self, response: Response) -> None:
        if response.status >= 400:
            self.problems.append(f"HTTP {response.status}: {response.url}")

    async def until(self, condition: str, timeout_s: float, arg: Any = None) -> Any:
        """Waits for a JavaScript condition (over ``window.omni``); returns its value. On a
        timeout, the failure shows the page's state."""
        try:
            handle = await self.page.wait_for_function(
                condition, arg=arg, timeout=timeout_s * 1000, polling=50
            )
        except PlaywrightTimeout:
            state = await self.page.evaluate(SUMMARY)
            raise AssertionError(f"timed out waiting for {condition}\npage: {state}") from None
        return await handle.json_value()

    async def screenshot(self, name: str) -> Path:
        """Saves the whole page as ``name``.png; returns the artifact's path."""
        return save_screenshot(name, await self.page.screenshot(full_page=True))


def save_screenshot(name: str, png: bytes) -> Path:
    """Writes a screenshot to the artifacts, and to ``$OMNI_PAGE_SCREENSHOTS`` if set."""
    folders = [ARTIFACTS, *([Path(SHOWCASE)] if SHOWCASE else [])]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.png").write_bytes(png)
    return ARTIFACTS / f"{name}.png"


@contextlib.asynccontextmanager
async def chromium_page(microphone: Path) -> AsyncIterator[PageRun]:
    """A fresh Chromium page whose microphone plays ``microphone``."""
    assert shutil.which(CHROMIUM), "the browser tests need Debian's chromium package"
    flags = [
        "--disable-gpu",
        "--disable-quic",
        "--autoplay-policy=no-user-gesture-required",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone}%noloop",
    ]
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, args=flags)
        try:
            run = PageRun(await browser.new_page(viewport=VIEWPORT))  # type: ignore[arg-type]
            run.watch()
            yield run
        finally:
            await browser.close()
