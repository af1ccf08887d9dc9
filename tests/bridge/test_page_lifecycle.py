"""The page's session from its start to its end, in headless Chromium, as a person meets it:
waiting in the service's queue (its place and wait shown, the microphone held closed until the
session starts) and leaving (a page closed without Stop ends its session at once, not after
the disconnect grace). Each on both of the page's carriers: its websocket, and a WebRTC call
(its microphone on the call's track, held closed there)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from omni_grpc.client import DuplexClient
from omni_grpc.server.app import RunningServer, start_server
from omni_grpc.server.settings import QueueSettings
from tests.bridge.page_driver import chromium_page, speech_wav
from tests.bridge.testkit import SPEECH_TEXT, running_bridge, service_settings
from tests.serving import eventually

pytestmark = pytest.mark.browser

# Whether a call's microphone track is open (null on a websocket, which has none).
MIC_ON_CALL = "() => omni.callMicOpen()"
CARRIERS = pytest.mark.parametrize("carrier", ["websocket", "webrtc"])


@pytest.fixture
async def one_place() -> AsyncIterator[RunningServer]:
    """A paced loopback that serves one session at a time; the next ones wait in its queue."""
    chosen = service_settings(
        engine_options={"pace": "realtime"}, queue=QueueSettings(capacity=1), route="r1"
    )
    running = await start_server(chosen)
    yield running
    await running.stop()


@CARRIERS
async def test_a_waiting_page_shows_its_place_holds_the_microphone_then_goes_live(
    one_place: RunningServer, tmp_path: Path, carrier: str
) -> None:
    speech = speech_wav(tmp_path, "speech", [SPEECH_TEXT, 1.0])
    holder = await DuplexClient.connect(one_place.target)  # takes the only place
    async with running_bridge(one_place) as port, chromium_page(speech) as run:
        await run.page.goto(f"http://127.0.0.1:{port}/?carrier={carrier}")
        await run.page.click("#start")
        queue = await run.until("() => omni.status === 'queued' && omni.queue", 10)
        badge = await run.page.text_content("#status")
        await run.until("() => omni.heldChunks >= 5", 10)  # the microphone runs, held closed
        # On a call, the track is held closed too: it sends silence, not the room.
        call_mic_open = await run.page.evaluate(MIC_ON_CALL)
        assert one_place.sessions.waiting is not None
        assert one_place.sessions.waiting.queue.waiting()["default"] == (1, 0)
        await run.screenshot("page-queued")
        await holder.close()  # the place frees: the page's session starts
        await run.until("() => omni.status === 'live'", 10)
        held = await run.page.evaluate("omni.heldChunks")
        states = await run.page.evaluate("omni.states")
        live_mic_open = await run.page.evaluate(MIC_ON_CALL)
        used = await run.page.evaluate(
            "[omni.carrier, document.querySelector('#carrier-used').textContent]"
        )
    assert run.problems == [], run.problems
    assert queue["position"] == 1 and queue["priorityClass"] == "default"
    assert badge is not None and "waiting for a place · 1 in line" in badge, badge
    assert states[:3] == ["idle", "connecting", "queued"] and "live" in states, states
    assert held >= 5
    if carrier == "webrtc":
        assert (call_mic_open, live_mic_open) == (False, True)
    assert used[0] == carrier and used[1] in ("over WebRTC", "over websocket"), used


@CARRIERS
async def test_a_waiting_page_that_goes_away_leaves_the_queue_at_once(
    one_place: RunningServer, tmp_path: Path, carrier: str
) -> None:
    quiet = speech_wav(tmp_path, "quiet", [1.0])
    holder = await DuplexClient.connect(one_place.target)  # takes the only place
    try:
        async with running_bridge(one_place) as port, chromium_page(quiet) as run:
            await run.page.goto(f"http://127.0.0.1:{port}/?carrier={carrier}")
            await run.page.click("#start")
            await run.until("() => omni.status === 'queued'", 10)
            waiting = one_place.sessions.waiting
            assert waiting is not None and waiting.queue.waiting()["default"] == (1, 0)
            left = time.monotonic()
            await run.page.goto("about:blank")  # closed without Stop, still waiting
            await eventually(lambda: waiting.queue.waiting()["default"][0] == 0, timeout_s=5.0)
            gone_s = time.monotonic() - left
        assert run.problems == [], run.problems
        # Well inside the disconnect grace (5 s here); a waiting websocket's relay reads
        # nothing from its page, and learns it is gone a moment later than a live one's.
        assert gone_s < one_place.settings.limits.disconnect_grace_s / 2
    finally:
        await holder.close()


@CARRIERS
async def test_a_page_that_goes_away_ends_its_session_at_once(tmp_path: Path, carrier: str) -> None:
    running = await start_server(service_settings(engine_options={"pace": "realtime"}))
    try:
        quiet = speech_wav(tmp_path, "quiet", [1.0])
        async with running_bridge(running) as port, chromium_page(quiet) as run:
            await run.page.goto(f"http://127.0.0.1:{port}/?carrier={carrier}")
            await run.page.click("#start")
            await run.until("() => omni.status === 'live'", 10)
            assert await run.page.evaluate("omni.carrier") == carrier
            assert len(running.registry) == 1
            left = time.monotonic()
            await run.page.goto("about:blank")  # closed without Stop
            await eventually(lambda: len(running.registry) == 0, timeout_s=5.0)
            gone_s = time.monotonic() - left
        assert run.problems == [], run.problems
        # Well inside the disconnect grace a dropped network is given (30 s).
        assert gone_s < running.settings.limits.disconnect_grace_s / 6
    finally:
        await running.stop()


@CARRIERS
async def test_a_page_opened_with_a_client_secret_resumes_after_a_drop(
    tmp_path: Path, carrier: str
) -> None:
    """The page's one-use secret is spent by its first socket: after a drop it comes back with
    the resume secret its session was given, not the spent secret (which failed twelve times
    over, and the session expired)."""
    key = "backend-key"
    running = await start_server(
        service_settings(engine_options={"pace": "realtime"}, api_keys=(key,))
    )
    try:
        quiet = speech_wav(tmp_path, "quiet", [1.0])
        async with running_bridge(running, api_keys=(key,)) as port, chromium_page(quiet) as run:
            async with aiohttp.ClientSession() as http:
                minting = f"http://127.0.0.1:{port}/v1/realtime/client_secrets"
                async with http.post(minting, headers={"Authorization": f"Bearer {key}"}) as made:
                    secret = (await made.json())["value"]
            await run.page.goto(f"http://127.0.0.1:{port}/?key={secret}&carrier={carrier}")
            await run.page.click("#start")
            await run.until("() => omni.status === 'live' && omni.resumeSecret", 10)
            session_id = await run.page.evaluate("omni.sessionId")
            await run.page.evaluate("omni.dropSocket()")
            await run.until("() => omni.resumes === 1 && omni.status !== 'reconnecting'", 15)
            await run.page.evaluate("omni.dropSocket()")  # and again, with the fresh one
            await run.until("() => omni.resumes === 2 && omni.status !== 'reconnecting'", 15)
            states = await run.page.evaluate("omni.states")
            after = await run.page.evaluate("omni.sessionId")
            used = await run.page.evaluate("omni.carrier")
        assert run.problems == [], run.problems  # no refused upgrade on the way
        assert after == session_id and "closed" not in states, states
        assert used == carrier
    finally:
        await running.stop()
