"""Recorded sessions through the bridge: a session option asks for one in both dialects; and a
session held through the real page in Chromium, with a barge-in and a typed turn, is recorded,
then replayed against loopback, over gRPC and through the bridge.

The page run's report goes to the test artifacts (``page_replay.json`` and its chart
``page_replay.html``), as the screenshots do (``page_driver``)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from omni_grpc.client.replay import chart_html, summary
from omni_grpc.server.app import RunningServer, start_server
from omni_grpc.server.recording import RecordSettings
from tests.bridge.page_driver import ARTIFACTS, chromium_page, speech_wav
from tests.bridge.testkit import SPEECH_TEXT, running_bridge, service_settings

INTERRUPTION = "wait, say that again please"
TYPED = "what time is it in Lisbon right now"
PACING_P95_MS = 20.0  # the target for a page session's replay


def recording(folder: Path, policy: str = "all") -> RecordSettings:
    return RecordSettings(policy=policy, folder=folder)


@pytest.fixture
async def asking_service(tmp_path: Path) -> AsyncIterator[RunningServer]:
    running = await start_server(service_settings(recording=recording(tmp_path, "on-request")))
    yield running
    await running.stop()


def recorded_ids(folder: Path) -> list[str]:
    return [path.name for path in folder.iterdir()]


async def opened(url: str, session: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_json({"type": "session.update", "session": session})
        created = await asyncio.wait_for(ws.receive_json(), 10)
        await ws.send_json({"type": "session.close"})
        return created


@pytest.mark.parametrize("path", ["/v1/realtime?extensions=1", "/v1/duplex"])
async def test_a_session_option_asks_for_a_recording_in_both_dialects(
    asking_service: RunningServer, tmp_path: Path, path: str
) -> None:
    async with running_bridge(asking_service) as port:
        url = f"ws://127.0.0.1:{port}{path}"
        asked = await opened(url, {"recording": {"enabled": True, "omit_text": True}})
        plain = await opened(url, {"instructions": "not recorded"})
    assert asked["type"] == "session.created", asked
    # The session says it is recorded, and how; one that did not ask says it is not.
    told = {"enabled": True, "omit_audio": False, "omit_text": True}
    assert asked["session"]["recording"] == told
    assert plain["session"]["recording"]["enabled"] is False
    await asking_service.stop()  # the recordings written to their ends
    assert recorded_ids(tmp_path) == [asked["session"]["id"]] != [plain["session"]["id"]]


async def test_a_stock_client_is_not_told_of_recordings(asking_service: RunningServer) -> None:
    async with running_bridge(asking_service) as port:
        url = f"ws://127.0.0.1:{port}/v1/realtime"  # no extensions: GA's session object only
        created = await opened(url, {"instructions": "a stock client"})
    assert created["type"] == "session.created" and "recording" not in created["session"]


@pytest.fixture
async def paced(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, Path]]:
    """A loopback at real-time pace, recording every session."""
    folder = tmp_path / "recordings"
    settings = service_settings(engine_options={"pace": "realtime"}, recording=recording(folder))
    running = await start_server(settings)
    yield running, folder
    await running.stop()


async def page_session(running: RunningServer, tmp_path: Path) -> str:
    """Speech, speech over the answer (a barge-in), a typed turn, stop; the session's id."""
    mic = speech_wav(tmp_path, "mic", [2.5, SPEECH_TEXT, 2.5, INTERRUPTION, 3.0])
    async with running_bridge(running.target) as port, chromium_page(mic) as run:
        await run.page.goto(f"http://127.0.0.1:{port}/?carrier=websocket")
        await run.page.click("#start")
        # The page tells the person talking that the session is recorded.
        await run.until("() => !document.getElementById('recorded').hidden", 30)
        first = await run.until(
            """() => { const [id, r] = Object.entries(omni.responses)[0] || [];
                return r && r.done && r.status === "cancelled" && id; }""",
            30,
        )
        await run.until(
            """(first) => Object.entries(omni.responses)
                .some(([id, r]) => id !== first && r.done && r.playedMs >= r.audioMs - 0.5)""",
            30,
            first,
        )
        await run.page.fill("#text", TYPED)
        await run.page.press("#text", "Enter")
        await run.until(
            """(text) => Object.values(omni.responses)
                .some((r) => r.done && r.transcript.includes(`you wrote "${text}"`))""",
            30,
            TYPED,
        )
        await asyncio.sleep(1.0)  # the typed answer plays out, acknowledged
        await run.page.click("#stop")
        await run.until("() => omni.status === 'closed'", 10)
        state = await run.page.evaluate("omni")
    assert run.problems == [] and state["errors"] == [], (run.problems, state["errors"])
    assert state["bargeIns"] == 1
    return str(state["sessionId"])


@pytest.mark.browser
async def test_a_page_session_is_recorded_and_its_replay_keeps_its_pacing_and_turns(
    paced: tuple[RunningServer, Path], tmp_path: Path
) -> None:
    running, folder = paced
    session_id = await page_session(running, tmp_path)
    await running.stop()  # the recording written to its end
    # The replays run as an operator runs them: `omni-grpc replay`, a process of its own.
    target = await start_server(service_settings(engine_options={"pace": "realtime"}))
    try:
        document = await replay(folder / session_id, tmp_path, "--target", target.target)
        async with running_bridge(target) as port:
            bridge = f"ws://127.0.0.1:{port}/v1/realtime"
            through = await replay(folder / session_id, tmp_path, "--bridge", bridge)
    finally:
        await target.stop()
    save(document, "page_replay")
    save(through, "page_replay_bridge")
    pacing = document["pacing"]
    assert pacing["in_order"] and pacing["commands"] == pacing["planned"], pacing
    assert pacing["p95_ms"] <= PACING_P95_MS, pacing
    turns = document["turns"]
    assert document["turns_match"], summary(document)
    recorded = [pair["recorded"] for pair in turns]
    assert [turn["barge_in"] for turn in recorded] == [True, False, False], recorded
    assert [turn["input"] for turn in recorded] == ["audio", "audio", "text"], recorded
    assert recorded[2]["said"] == TYPED and TYPED in recorded[2]["answer"]
    # Through the bridge: the same commands in order, the same turns.
    assert through["pacing"]["in_order"], through["pacing"]
    assert through["pacing"]["commands"] == through["pacing"]["planned"]
    assert through["turns_match"], summary(through)


async def replay(recorded: Path, tmp_path: Path, *how: str) -> dict[str, Any]:
    """``omni-grpc replay`` of ``recorded`` (``how``: its target); returns its report."""
    report = tmp_path / "report.json"
    command = ["-m", "omni_cli", "replay", str(recorded), *how, "--report", str(report)]
    process = await asyncio.create_subprocess_exec(
        sys.executable, *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode == 0, (out, err)
    document: dict[str, Any] = json.loads(report.read_bytes())
    return document


def save(document: dict[str, Any], name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{name}.json").write_text(json.dumps(document, indent=1) + "\n")
    (ARTIFACTS / f"{name}.html").write_text(chart_html(document))
    (ARTIFACTS / f"{name}.txt").write_text(summary(document))
