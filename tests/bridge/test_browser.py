"""The browser page in headless Chromium, driven as a person would: talk, interrupt, type,
change the instructions and the voice, mute, lose the network, stop.

Chromium's fake microphone plays speech made with espeak-ng; the page captures it with an
AudioWorklet, ends each turn itself (the loopback has no server VAD) and plays the reply through
its jitter buffer. Each test also holds the whole run to zero console errors, page errors,
failed requests and HTTP errors (``page_driver``), and saves screenshots of the page.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import math
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import WebSocketRoute

from omni_grpc.core import Limits
from omni_grpc.engine.loopback.session import LoopbackSession
from omni_grpc.server.app import RunningServer, start_server
from tests.bridge.page_driver import PageRun, chromium_page, speech_wav
from tests.bridge.testkit import SPEECH_TEXT, running_bridge, service_settings
from tests.serving import eventually

pytestmark = pytest.mark.browser

INTERRUPTION = "wait, say that again please"
LONG_SPEECH = f"{SPEECH_TEXT}, and the page shows these words while they are spoken"
TYPED = "what time is it in Lisbon right now"  # the loopback's tone for it lasts 2.1 s
RETYPED = "never mind"
INSTRUCTIONS = "Answer in one short sentence."
VOICE = "en-gb"
IDLE_TIMEOUT_S = 3.0
# The latency columns of the turns table: turn end -> first audio, server first audio.
LATENCY_COLUMNS = (3, 4)
TURN_WAIT_COLUMN = 6  # the silence the service waited for before it ended the turn


@pytest.fixture
async def paced_service() -> AsyncIterator[RunningServer]:
    running = await start_server(service_settings(engine_options={"pace": "realtime"}))
    yield running
    await running.stop()


@pytest.fixture
async def impatient_service() -> AsyncIterator[RunningServer]:
    """A paced loopback whose sessions expire after 3 s without a command."""
    limits = Limits(disconnect_grace_s=5.0, idle_timeout_s=IDLE_TIMEOUT_S)
    running = await start_server(
        service_settings(engine_options={"pace": "realtime"}, limits=limits)
    )
    yield running
    await running.stop()


async def table_rows(run: PageRun) -> dict[str, list[str]]:
    """The turns table: response id -> its cells."""
    rows: dict[str, list[str]] = await run.page.eval_on_selector_all(
        "#turns tr",
        "rows => Object.fromEntries(rows.map(r => [r.dataset.id, "
        "[...r.cells].map(c => c.textContent)]))",
    )
    return rows


async def test_speech_over_a_reply_cuts_it_and_the_next_reply_survives_a_drop(
    paced_service: RunningServer, tmp_path: Path
) -> None:
    # A turn, then, while its reply plays, the person speaks again.
    # The reply echoes the whole turn (6 s); the second sentence starts 1.8 s after it does,
    # with seconds to spare for a busy machine's lag on either side.
    mic = speech_wav(tmp_path, "mic", [2.5, SPEECH_TEXT, 2.5, INTERRUPTION, 3.0])
    async with running_bridge(paced_service.target) as port, chromium_page(mic) as run:
        await run.page.goto(f"http://127.0.0.1:{port}/?carrier=websocket")
        await run.page.click("#start")
        # The second sentence cuts the first reply short.
        first = await run.until(
            """() => { const [id, r] = Object.entries(omni.responses)[0] || [];
                return r && r.done && r.status === "cancelled" && id; }""",
            20,
        )
        barge_badge = await run.page.is_visible("#barge.on")
        await run.screenshot("page_barge_in")
        # The reply to the second sentence: the socket drops in the middle of it.
        second = await run.until(
            """(first) => Object.entries(omni.responses)
                .filter(([id, r]) => id !== first && r.audioMs >= 600 && !r.done)
                .map(([id]) => id)[0]""",
            20,
            first,
        )
        await run.page.evaluate("omni.dropSocket()")
        await run.until(
            """(id) => { const r = omni.responses[id], ack = omni.acked[id];
                return omni.resumes === 1 && r.done && r.playedMs >= r.audioMs - 0.5
                    && ack && ack.played_ms >= r.audioMs - 0.5; }""",
            20,
            second,
        )
        state = await run.page.evaluate("omni")
        rows = await table_rows(run)
        cut_note = await run.page.text_content(f'#transcript p.cut[data-id="{first}"] .note')
        bars = await run.page.eval_on_selector_all("#chart rect", "bars => bars.length")
        await run.screenshot("page_conversation")

    assert run.problems == [] and state["errors"] == [], (run.problems, state["errors"])
    states = state["states"]
    assert states[:3] == ["idle", "connecting", "live"], states
    assert states[3:5] == ["reconnecting", "resumed"], states
    assert state["resumes"] == 1 and state["clientTurns"]
    # The interruption: one barge-in, shown, and the cut reply marked where it stopped.
    cut = state["responses"][first]
    assert state["bargeIns"] == 1 and barge_badge, (state["bargeIns"], cut)
    assert cut["reason"] == "output_audio_cleared" and 0 < cut["playedMs"] <= cut["audioMs"], cut
    assert cut_note is not None and cut_note.startswith("cut at"), cut_note
    reply = state["responses"][second]
    assert reply["status"] == "completed" and reply["transcript"].startswith("you said")
    # Across the drop, the deltas tile the reply's media clock: nothing missing, nothing twice.
    deltas = reply["deltas"]
    assert deltas[0][0] == 0
    for (start, duration), (next_start, _) in itertools.pairwise(deltas):
        assert next_start == pytest.approx(start + duration)
    assert sum(duration for _, duration in deltas) == pytest.approx(reply["audioMs"])
    # Played to the end, and the service confirmed the played time.
    assert reply["playedMs"] == pytest.approx(reply["audioMs"], abs=0.5)
    assert state["acked"][second]["played_ms"] == pytest.approx(reply["audioMs"], abs=0.5)
    # Both turns had audio: every latency cell is filled, and each is charted.
    for rid in (first, second):
        response = state["responses"][rid]
        assert response["clientLatencyMs"] > 0 and response["serverLatencyMs"] > 0, response
        assert all(rows[rid][column].endswith(" ms") for column in LATENCY_COLUMNS), rows[rid]
    charted = sum(
        response[field] is not None
        for response in state["responses"].values()
        for field in ("clientLatencyMs", "serverLatencyMs", "firstTextMs")
    )
    assert bars == charted >= 4


class Network:
    """The page's websockets, routed through the test: it counts what the page sends by type,
    can cut the connection, and can hold the bridge's answers (a slow network)."""

    def __init__(self) -> None:
        self.sent: collections.Counter[str] = collections.Counter()
        self.routes: list[tuple[WebSocketRoute, WebSocketRoute]] = []  # (page side, bridge side)
        self.holding = False
        self.held: list[str | bytes] = []

    def route(self, page_side: WebSocketRoute) -> None:
        bridge_side = page_side.connect_to_server()
        self.routes.append((page_side, bridge_side))

        def from_page(message: str | bytes) -> None:
            if isinstance(message, str):
                self.sent[json.loads(message)["type"]] += 1
            bridge_side.send(message)

        def from_bridge(message: str | bytes) -> None:
            if self.holding:
                self.held.append(message)
            else:
                page_side.send(message)

        page_side.on_message(from_page)
        bridge_side.on_message(from_bridge)

    async def cut(self) -> None:
        page_side, bridge_side = self.routes[-1]
        await page_side.close(code=1001, reason="network_cut")
        await bridge_side.close()

    def release(self) -> None:
        page_side, _ = self.routes[-1]
        self.holding = False
        for message in self.held:
            page_side.send(message)
        self.held.clear()


async def test_every_control_works(impatient_service: RunningServer, tmp_path: Path) -> None:
    network = Network()
    quiet = speech_wav(tmp_path, "quiet", [1.0])
    async with running_bridge(impatient_service.target) as port, chromium_page(quiet) as run:
        page = run.page
        await page.route_web_socket(re.compile(r"/v1/realtime"), network.route)
        await page.goto(f"http://127.0.0.1:{port}/?carrier=websocket")
        await page.click("#settings summary")
        await run.screenshot("page_idle")
        idle = await page.evaluate(
            "['#stop', '#mute', '#send'].map(s => document.querySelector(s).disabled)"
        )
        assert idle == [True, True, True] and await page.text_content("#status") == "idle"

        await page.click("#start")
        await run.until("() => omni.status === 'live'", 10)
        [host] = list(impatient_service.sessions)
        # A server that records nothing: the page does not say the session is recorded.
        assert await page.is_hidden("#recorded")

        # Instructions and voice: applied to the live session, down to the engine.
        await page.fill("#instructions", INSTRUCTIONS)
        await page.fill("#voice", VOICE)
        await page.click("#apply")
        await run.until(
            "(i) => omni.session.instructions === i && "
            "document.querySelector('#settings-state').textContent === 'applied'",
            10,
            INSTRUCTIONS,
        )
        assert (host.session.config.instructions, host.session.config.voice) == (
            INSTRUCTIONS,
            VOICE,
        )
        engine = host.engine
        assert isinstance(engine, LoopbackSession)
        assert (engine.config.instructions, engine.config.voice) == (INSTRUCTIONS, VOICE)

        # A typed turn is answered; a second one typed while that answer plays cuts it short.
        await page.fill("#text", TYPED)
        await page.press("#text", "Enter")
        interrupted = await run.until(
            """() => { const [id, r] = Object.entries(omni.responses).pop() || [];
                return r && r.audioMs >= 300 && !r.done && id; }""",
            15,
        )
        await page.fill("#text", RETYPED)
        await page.press("#text", "Enter")
        typed_reply = await run.until(
            """(text) => Object.entries(omni.responses)
                .filter(([, r]) => r.done && r.transcript.includes(`you wrote "${text}"`))
                .map(([id]) => id)[0]""",
            15,
            RETYPED,
        )
        typed = await page.eval_on_selector_all(
            "#transcript p.you.typed .words", "lines => lines.map(line => line.textContent)"
        )
        answer = await page.text_content(f'#transcript p.assistant[data-id="{typed_reply}"]')
        cut_note = await page.text_content(f'#transcript p.cut[data-id="{interrupted}"] .note')
        cut = await page.evaluate("(id) => omni.responses[id]", interrupted)
        assert typed == [TYPED, RETYPED], typed
        assert answer is not None and f'you wrote "{RETYPED}"' in answer, answer
        assert cut["status"] == "cancelled" and cut["reason"] == "output_audio_cleared", cut
        assert cut_note is not None and cut_note.startswith("cut at"), cut_note
        assert network.sent["conversation.item.create"] == network.sent["response.create"] == 2
        assert network.sent["output_audio_buffer.clear"] == 1
        typed_row = (await table_rows(run))[typed_reply]
        assert all(typed_row[column].endswith(" ms") for column in LATENCY_COLUMNS), typed_row

        # Mute: no audio leaves the page until unmuted, and, quiet for longer than the idle
        # timeout, the page keeps its session alive with heartbeats.
        await page.click("#mute")
        assert await page.get_attribute("#mute", "aria-pressed") == "true"
        await asyncio.sleep(0.3)  # a chunk captured just before the click may still be on its way
        muted_count = network.sent["input_audio_buffer.append"]
        await asyncio.sleep(IDLE_TIMEOUT_S + 1)
        assert network.sent["input_audio_buffer.append"] == muted_count
        assert network.sent["session.heartbeat"] >= 2 and not host.ended
        assert await page.evaluate("omni.status") == "live"
        await page.click("#mute")
        await eventually(lambda: network.sent["input_audio_buffer.append"] >= muted_count + 3)

        # Nobody spoke for 10 s of sent audio: the page clears what the service held.
        await eventually(lambda: network.sent["input_audio_buffer.clear"] >= 1, timeout_s=15)

        # The network drops: the page shows it reconnecting, then resumes the same session.
        network.holding = True
        await network.cut()
        await run.until("() => omni.status === 'reconnecting'", 5)
        await eventually(lambda: len(network.routes) == 2 and bool(network.held))
        await run.screenshot("page_reconnecting")
        assert await page.evaluate("omni.status") == "reconnecting"
        network.release()
        await run.until("() => omni.status === 'resumed' && omni.resumes === 1", 10)
        await run.screenshot("page_resumed")
        assert network.sent["session.resume"] == 1

        # Stop: the session closes on the service and the microphone goes off.
        await page.click("#stop")
        await run.until("() => omni.status === 'closed'", 10)
        await eventually(lambda: host.ended)
        controls = await page.evaluate(
            "['#start', '#stop', '#mute'].map(s => document.querySelector(s).disabled)"
        )
        state = await page.evaluate("omni")

        # Start again: a new session.
        await page.click("#start")
        await run.until(
            "(old) => omni.status === 'live' && omni.sessionId !== old", 10, host.session.id
        )

    assert run.problems == [] and state["errors"] == [], (run.problems, state["errors"])
    assert controls == [False, True, True]
    assert network.sent["session.close"] == 1
    assert state["bargeIns"] == 0  # typing over a reply cuts it, but is no barge-in by voice
    assert state["states"] == ["idle", "connecting", "live", "reconnecting", "resumed", "closed"], (
        state["states"]
    )
    assert state["sessionId"] == host.session.id


# The browser refuses the microphone, as it does when a person says no.
REFUSE_MICROPHONE = """
navigator.mediaDevices.getUserMedia = () =>
    Promise.reject(new DOMException("Permission denied", "NotAllowedError"));
"""


async def test_without_a_microphone_the_page_talks_in_text(
    paced_service: RunningServer, tmp_path: Path
) -> None:
    quiet = speech_wav(tmp_path, "quiet", [1.0])
    async with running_bridge(paced_service.target) as port, chromium_page(quiet) as run:
        await run.page.add_init_script(REFUSE_MICROPHONE)
        await run.page.goto(f"http://127.0.0.1:{port}/?carrier=websocket")
        # Settings made before Start open the session with them.
        await run.page.click("#settings summary")
        await run.page.fill("#instructions", INSTRUCTIONS)
        await run.page.fill("#voice", VOICE)
        await run.page.click("#start")
        await run.until("() => omni.status === 'live'", 10)
        [host] = list(paced_service.sessions)
        opened_with = (host.session.config.instructions, host.session.config.voice)
        await run.page.fill("#text", TYPED)
        await run.page.press("#text", "Enter")
        await run.until(
            """(text) => Object.values(omni.responses)
                .some((r) => r.done && r.transcript.includes(`you wrote "${text}"`))""",
            15,
            TYPED,
        )
        said = await run.page.text_content("#transcript p.error .words")
        mute_disabled = await run.page.is_disabled("#mute")
        state = await run.page.evaluate("omni")

    assert run.problems == [], run.problems
    assert opened_with == (INSTRUCTIONS, VOICE)
    assert [error["code"] for error in state["errors"]] == ["microphone"], state["errors"]
    assert said == "microphone: Permission denied; typed turns still work", said
    assert mute_disabled


async def test_page_is_served(paced_service: RunningServer) -> None:
    async with (
        running_bridge(paced_service.target) as port,
        asyncio.timeout(10),
        aiohttp.ClientSession() as http,
    ):
        async with http.get(f"http://127.0.0.1:{port}/") as response:
            assert response.status == 200 and response.content_type == "text/html"
            page = await response.text()
        # Everything the page names is served: its scripts, their modules, style and icon.
        named = re.findall(r'(?:src|href)="(/static/[^"]+)"', page)
        modules = []
        for path in named:
            async with http.get(f"http://127.0.0.1:{port}{path}") as response:
                assert response.status == 200, path
                if path.endswith(".js"):
                    assert "javascript" in response.content_type, path
                    script = await response.text()
                    modules += re.findall(r'from "\./([a-z]+\.js)"', script)
        assert {"/static/app.js", "/static/page.css", "/static/icon.svg"} <= set(named)
        for module in modules:
            async with http.get(f"http://127.0.0.1:{port}/static/{module}") as response:
                assert response.status == 200, module
        async with http.get(f"http://127.0.0.1:{port}/static/worklet.js") as response:
            assert response.status == 200 and "javascript" in response.content_type


@pytest.mark.slow
async def test_a_turn_ended_by_server_vad_has_every_latency_cell(tmp_path: Path) -> None:
    """The embedded engine detects the end of speech itself: the page learns it from
    ``speech_stopped`` and times the answer from the moment that speech was captured, and
    shows the words of the turn while it is spoken (partial transcripts)."""
    # Long enough for several partial decodes even on a loaded machine: words are sent only
    # once two of them agree.
    mic = speech_wav(tmp_path, "mic", [0.5, LONG_SPEECH, 4.0])
    options = {"responder": "echo", "partial_every_ms": "500"}
    embedded = service_settings(engine="embedded", engine_options=options)
    running = await start_server(embedded)
    try:
        async with running_bridge(running.target) as port, chromium_page(mic) as run:
            await run.page.goto(f"http://127.0.0.1:{port}/?carrier=websocket")
            await run.page.click("#start")
            rid = await run.until(
                "() => Object.entries(omni.responses).filter(([, r]) => r.done && r.audioMs > 0)"
                ".map(([id]) => id)[0]",
                60,
            )
            state = await run.page.evaluate("omni")
            rows = await table_rows(run)
            said = await run.page.text_content("#transcript p.you.spoken .words")
            still_partial = await run.page.locator("#transcript p.you.partial").count()
            await run.screenshot("page_server_vad")
    finally:
        await running.stop()

    assert run.problems == [] and state["errors"] == [], (run.problems, state["errors"])
    assert not state["clientTurns"] and state["userTranscripts"]
    assert said == state["userTranscripts"][0]
    # The words shown while the turn was spoken, then replaced by its transcript.
    assert [text for text in state["partials"].values() if text.strip()], state["partials"]
    assert still_partial == 0
    reply = state["responses"][rid]
    assert reply["clientLatencyMs"] > 0 and reply["serverLatencyMs"] > 0, reply
    assert all(rows[rid][column].endswith(" ms") for column in LATENCY_COLUMNS), rows[rid]


@pytest.mark.slow
async def test_a_backchannel_holds_the_reply_and_the_table_shows_the_turn_end_wait(
    tmp_path: Path,
) -> None:
    """The embedded engine judges turns from their words (SmolLM2): the page asks for it,
    shows how long the service waited before it ended the turn, and shows the reply held by
    "yeah" over it and going on (the page asks for that too, where the engine hears words)."""
    mic = speech_wav(tmp_path, "mic", [0.5, LONG_SPEECH, 2.5, "yeah", 8.0])
    options = {"responder": "echo", "turn_judge": "on", "pace": "realtime"}
    running = await start_server(service_settings(engine="embedded", engine_options=options))
    try:
        async with running_bridge(running.target) as port, chromium_page(mic) as run:
            await run.page.goto(f"http://127.0.0.1:{port}/?carrier=websocket")
            await run.page.click("#start")
            rid = await run.until(
                """() => { const resumed = omni.overlaps.find((d) => d.action === "resume");
                    return resumed && omni.responses[resumed.response_id]?.done
                        && resumed.response_id; }""",
                90,
            )
            state = await run.page.evaluate("omni")
            rows = await table_rows(run)
            held = await run.page.text_content(f'#transcript p[data-id="{rid}"] .overlap')
            await run.screenshot("page_turn_taking")
    finally:
        await running.stop()

    assert run.problems == [] and state["errors"] == [], (run.problems, state["errors"])
    assert state["session"]["audio"]["input"]["turn_detection"]["type"] == "semantic_vad"
    pause, resume = [d for d in state["overlaps"] if d["response_id"] == rid][:2]
    assert (pause["action"], resume["action"], resume["reason"]) == (
        "pause",
        "resume",
        "backchannel",
    )
    assert held is not None and held.startswith("paused, resumed at"), held
    reply = state["responses"][rid]
    assert reply["status"] == "completed" and state["bargeIns"] == 0, (reply, state["bargeIns"])
    # The turn it answered was ended by the service's judgement: its wait is in the table.
    assert reply["turnWaitMs"] is not None and reply["turnWaitMs"] > 0, reply
    # And how long after the end of speech the judgement came: time the user waited too.
    decided = reply["turnDecidedMs"]
    assert decided is not None and decided > 0, reply
    assert rows[rid][TURN_WAIT_COLUMN] == (
        f"{reply['turnWaitMs']} ms, decided {math.floor(decided + 0.5)} ms after speech"
    ), rows[rid]
