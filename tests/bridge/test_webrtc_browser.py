"""The stock ``@openai/agents-realtime`` ``RealtimeSession`` in headless Chromium, over WebRTC.

The page (``node/webrtc_agent.mjs``, bundled by esbuild from the locked packages) sets no
transport option, so the SDK takes its browser default, WebRTC: it posts its SDP offer to the
bridge's ``/v1/realtime/calls`` with a client secret the bridge minted, sends its microphone
(Chromium's fake one, playing a WAV of speech) on its Opus track, and plays the answer's track.
The loopback engine behind the bridge says each turn back, so the answer heard is the question.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from omni_grpc.server.app import RunningServer
from tests.bridge.page_driver import PageRun, chromium_page, speech_wav
from tests.bridge.testkit import SPEECH_TEXT, running_bridge, service_settings
from tests.node_packages import installed
from tests.serving import serving

pytestmark = pytest.mark.browser

NODE_DIR = Path(__file__).parent / "node"
KEY = "sk-webrtc-test"
PAGE = """<!doctype html><meta charset="utf-8"><title>agent</title>
<script type="module" src="/agent.js"></script>"""


@pytest.fixture(scope="module")
def agent_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page's script: the SDK and ``webrtc_agent.mjs``, bundled for the browser."""
    folder = installed(NODE_DIR)
    out = tmp_path_factory.mktemp("bundle") / "agent.js"
    subprocess.run(
        [
            str(folder / "node_modules" / ".bin" / "esbuild"),
            str(folder / "webrtc_agent.mjs"),
            "--bundle",
            "--format=esm",
            "--platform=browser",
            f"--outfile={out}",
            "--log-level=warning",
        ],
        check=True,
        timeout=120,
    )
    return out


@contextlib.asynccontextmanager
async def page_server(bundle: Path) -> AsyncIterator[int]:
    """An app's own origin (another port on 127.0.0.1) serving the page and its script."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def none(request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def script(request: web.Request) -> web.FileResponse:
        return web.FileResponse(bundle)

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/agent.js", script)
    app.router.add_get("/favicon.ico", none)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def client_secret(port: int) -> str:
    """A client secret minted by the bridge, as an app's backend gets one for its page."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{port}/v1/realtime/client_secrets",
            headers={"Authorization": f"Bearer {KEY}"},
            json={},
        ) as answer,
    ):
        assert answer.status == 200, await answer.text()
        return str((await answer.json())["value"])


@contextlib.asynccontextmanager
async def agent_page(
    bundle: Path, service: RunningServer, microphone: Path, *, tools: bool, vad: bool = False
) -> AsyncIterator[PageRun]:
    """The agent's page, connected to a bridge (with keys) in front of ``service``."""
    async with (
        running_bridge(service, api_keys=(KEY,)) as bridge_port,
        page_server(bundle) as page_port,
        chromium_page(microphone) as run,
    ):
        secret = await client_secret(bridge_port)
        calls = f"http://127.0.0.1:{bridge_port}/v1/realtime/calls"
        query = f"key={secret}&url={calls}&tools={int(tools)}&vad={int(vad)}"
        await run.page.goto(f"http://127.0.0.1:{page_port}/?{query}")
        await run.until("omni.connected || omni.errors.length", 30)
        assert await run.page.evaluate("omni.errors") == []
        yield run


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] == kind]


async def _played_out(run: Any, within_s: float = 10.0) -> float:
    """The energy heard once what was already on its way has played: the reading once half a
    second passes with no more heard (how long that takes depends on the machine's load: the
    browser's jitter buffer grows with it); fails if the audio never stops."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    heard = await run.page.evaluate("omni.heardEnergy()")
    while loop.time() < deadline:
        await asyncio.sleep(0.5)
        now = await run.page.evaluate("omni.heardEnergy()")
        if now - heard < 0.001:
            return float(now)
        heard = now
    raise AssertionError(f"the audio did not stop within {within_s} s of the barge-in")


async def test_a_stock_browser_agent_is_heard_answered_and_interrupted_over_webrtc(
    agent_bundle: Path, tmp_path: Path
) -> None:
    microphone = speech_wav(tmp_path, "question", [0.5, SPEECH_TEXT, 1.0])
    # Real time: the answer plays long enough to be interrupted.
    chosen = service_settings(engine_options={"pace": "realtime"})
    async with (
        serving(chosen) as service,
        agent_page(agent_bundle, service, microphone, tools=False) as run,
    ):
        assert (await run.page.evaluate("omni.callId()")).startswith("rtc_")
        # The question is all in once the microphone has played it (its WAV, then silence).
        await asyncio.sleep(4.5)
        await run.page.evaluate("omni.send({type: 'input_audio_buffer.commit'})")
        await run.page.evaluate("omni.send({type: 'response.create'})")
        await run.until("omni.events.some(e => e.type === 'output_audio_buffer.started')", 30)
        before = await run.page.evaluate("omni.heardEnergy()")
        await asyncio.sleep(1.0)
        heard = await run.page.evaluate("omni.heardEnergy()")
        assert heard > before + 0.01, (before, heard)  # the answer is heard on the track
        await run.page.evaluate("omni.interrupt()")
        await run.until("omni.events.some(e => e.type === 'output_audio_buffer.cleared')", 10)
        cut = await _played_out(run)  # what was in flight and in the jitter buffer
        await asyncio.sleep(1.5)
        after = await run.page.evaluate("omni.heardEnergy()")
        assert after - cut < 0.001, (cut, after)  # silence after the barge-in
        events: list[dict[str, Any]] = await run.page.evaluate("omni.events")
        # The question was heard: its turn held audio (an empty one is refused with an error),
        # and the answer heard above is that audio, said back.
        assert len(of_type(events, "input_audio_buffer.committed")) == 1
        assert of_type(events, "response.output_audio.delta") == []
        assert of_type(events, "output_audio_buffer.stopped") == []
        assert of_type(events, "error") == [], " ".join(e["type"] for e in events)
        assert await run.page.evaluate("omni.errors") == []
        assert run.problems == []


async def test_a_stock_browser_agent_runs_its_tool_over_webrtc(
    agent_bundle: Path, tmp_path: Path
) -> None:
    microphone = speech_wav(tmp_path, "question", [0.5, "what is the weather in Paris", 1.0])
    chosen = service_settings(engine_options={"pace": "fast", "tool_call": "auto"})
    async with (
        serving(chosen) as service,
        agent_page(agent_bundle, service, microphone, tools=True) as run,
    ):
        await asyncio.sleep(3.5)
        await run.page.evaluate("omni.send({type: 'input_audio_buffer.commit'})")
        await run.page.evaluate("omni.send({type: 'response.create'})")
        await run.until("omni.toolRuns.length > 0", 30)
        # The SDK sent the tool's output and asked for the answer, which calls nothing.
        await run.until(
            "omni.events.filter(e => e.type === 'response.done').some(e =>"
            " !(e.response.output || []).some(i => i.type === 'function_call'))",
            30,
        )
        events: list[dict[str, Any]] = await run.page.evaluate("omni.events")
        assert of_type(events, "error") == []
        assert await run.page.evaluate("omni.errors") == []
        assert run.problems == []


# Long enough that its echo still plays when the microphone speaks over it (about 11 s).
LONG_QUESTION = (
    "Please tell me a long story about the sea, the ships that sail on it, the sailors who "
    "steer them through the storms, and the harbours where they rest at night."
)


@pytest.mark.model  # Silero hears the speech over the answer (the embedded engine)
@pytest.mark.subprocess  # espeak-ng speaks the microphone's words
async def test_a_stock_browser_agent_is_cut_off_by_speech_over_its_answer(
    agent_bundle: Path, tmp_path: Path
) -> None:
    # Server VAD, OpenAI's interruption (any speech ends the reply): the microphone is silent
    # while the long answer starts, then speaks over it. The bridge stops the track at once.
    # The echo of the question plays about 11 s; the microphone speaks 7 s in, so the answer
    # may start anywhere in its first 7 s (a loaded machine connects and answers slowly) and
    # still be playing when it is spoken over.
    microphone = speech_wav(tmp_path, "over", [7.0, "No wait, I meant Tuesday.", 4.0])
    options = {"responder": "echo", "pace": "realtime"}
    async with (
        serving(service_settings(engine="embedded", engine_options=options)) as service,
        agent_page(agent_bundle, service, microphone, tools=False, vad=True) as run,
    ):
        await run.page.evaluate(f"omni.say({LONG_QUESTION!r})")
        await run.until("omni.events.some(e => e.type === 'output_audio_buffer.started')", 30)
        await run.until("omni.events.some(e => e.type === 'output_audio_buffer.cleared')", 30)
        cut = await _played_out(run)
        await asyncio.sleep(1.0)
        after = await run.page.evaluate("omni.heardEnergy()")
        events: list[dict[str, Any]] = await run.page.evaluate("omni.events")
        assert await run.page.evaluate("omni.errors") == []
    assert after - cut < 0.001, (cut, after)  # silence after the barge-in
    kinds = [e["type"] for e in events]
    started = kinds.index("output_audio_buffer.started")
    spoke = kinds.index("input_audio_buffer.speech_started", started)
    assert spoke < kinds.index("output_audio_buffer.cleared", spoke)
    answer = next(e for e in of_type(events, "response.done") if e["response"]["output"])
    assert answer["response"]["status"] == "cancelled", answer["response"]
    assert of_type(events, "error") == [], kinds
    assert run.problems == []
