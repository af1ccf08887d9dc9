"""The page's security headers and the Origin check, as headless Chromium enforces them.

The page must go live under its own Content-Security-Policy with no violation reported, and a
page from a foreign origin (another address, as a page the user visits elsewhere would be) must
not get a websocket to the bridge.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from playwright.async_api import Browser, async_playwright

from omni_grpc.server.app import RunningServer
from tests.bridge.testkit import running_bridge

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"  # Debian's package; browser downloads do not work here
FLAGS = [
    "--disable-gpu",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
]
# Records every CSP violation the page reports, before any of its own scripts runs.
VIOLATIONS = """
window.violations = [];
document.addEventListener("securitypolicyviolation",
    (e) => window.violations.push(`${e.violatedDirective} ${e.blockedURI}`));
"""
# What a page's script does to reach the bridge; resolves with what happened.
OPEN_SOCKET = """(url) => new Promise((resolve) => {
  const ws = new WebSocket(url, ["realtime"]);
  ws.onmessage = (e) => { resolve("message " + JSON.parse(e.data).type); ws.close(); };
  ws.onclose = (e) => resolve("closed " + e.code);
})"""


async def blank_page(request: web.Request) -> web.Response:
    return web.Response(text="<!doctype html>", content_type="text/html")


@pytest.fixture
async def chromium() -> AsyncIterator[Browser]:
    assert shutil.which(CHROMIUM), "the browser tests need Debian's chromium package"
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser
        finally:
            await browser.close()


async def test_the_page_goes_live_under_its_policy(
    service: RunningServer, chromium: Browser
) -> None:
    async with running_bridge(service.target) as port:
        page = await chromium.new_page()
        console: list[str] = []
        page.on("console", lambda message: console.append(message.text))
        await page.add_init_script(VIOLATIONS)
        response = await page.goto(f"http://127.0.0.1:{port}/")
        assert response is not None
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        # The stylesheet applied (the page's look is no longer inline).
        color = await page.eval_on_selector("#start", "b => getComputedStyle(b).backgroundColor")
        assert color == "rgb(40, 88, 214)", color
        await page.click("#start")
        await page.wait_for_function("() => omni.status === 'live'", timeout=10_000, polling=50)
        violations: list[Any] = await page.evaluate("() => window.violations")
    assert violations == [], violations
    assert not [line for line in console if "Content Security Policy" in line], console


async def test_a_foreign_page_gets_no_socket(service: RunningServer, chromium: Browser) -> None:
    foreign = web.Application()
    foreign.router.add_get("/", blank_page)
    runner = web.AppRunner(foreign, access_log=None)
    await runner.setup()
    # Another loopback address is another origin, as a page the user visits elsewhere is.
    await web.TCPSite(runner, "127.0.0.2", 0).start()
    try:
        async with running_bridge(service.target) as port:
            url = f"ws://127.0.0.1:{port}/v1/realtime?model=loopback-test"
            page = await chromium.new_page()
            await page.goto(f"http://127.0.0.2:{runner.addresses[0][1]}/")
            foreign_outcome = await page.evaluate(OPEN_SOCKET, url)
            own = await chromium.new_page()
            await own.goto(f"http://127.0.0.1:{port}/")
            own_outcome = await own.evaluate(OPEN_SOCKET, url)
    finally:
        await runner.cleanup()
    assert foreign_outcome == "closed 1006", foreign_outcome  # the upgrade got 403
    assert own_outcome == "message session.created", own_outcome
