"""The bridge's own page over WebRTC, in headless Chromium: its default carrier where the
browser has ``RTCPeerConnection``.

The page posts its offer to ``/v1/realtime/calls``, sends its microphone (Chromium's fake one,
playing speech made with espeak-ng) on the call's track, hears the answer on the remote track
in an ``<audio>`` element, and handles the ``oai-events`` channel's events on the same path as
the websocket's. The loopback engine says each turn back (the page ends the turns itself, as
the loopback detects none); the embedded engine hears the end of the turn itself (server VAD).
Each test holds the run to zero console errors, page errors, failed requests and HTTP errors.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from omni_grpc.server.app import RunningServer, start_server
from tests.bridge.page_driver import PageRun, chromium_page, speech_wav
from tests.bridge.testkit import SPEECH_TEXT, running_bridge, service_settings
from tests.serving import eventually

pytestmark = pytest.mark.browser

# The latency columns of the turns table: turn end -> first audio, server first audio.
LATENCY_COLUMNS = (3, 4)
# The loopback's words for a spoken turn, whole: a piece lost or doubled breaks them.
ECHO_WORDS = re.compile(r"you said \d+\.\d\d seconds of audio")
HEARD = 0.01  # the energy of about a second of the spoken answer, as Chromium counts it
# The loopback answers a typed turn with a tone, 60 ms a character: this one's lasts 4.3 s.
TYPED = "tell me about the harbours of Lisbon and the ships that sailed from them"
TYPED_TONE_MS = 60 * len(TYPED)
# The answer typed over is made at a quarter of real time: its 4.3 s tone is still being made
# 17 s after it starts, so the typed interruption reaches a reply in progress however loaded
# the machine, and the track, which sends faster than the answer is made, is mostly waiting
# for its next chunk when the cut comes (a cut there was once lost: CI failed on it).
SLOW_SPEED = "0.25"
RETYPED = "never mind"
LONG_SPEECH = f"{SPEECH_TEXT}, and the page shows these words while they are spoken"


@pytest.fixture
async def paced_service() -> AsyncIterator[RunningServer]:
    running = await start_server(service_settings(engine_options={"pace": "realtime"}))
    yield running
    await running.stop()


@pytest.fixture
async def slow_service() -> AsyncIterator[RunningServer]:
    options = {"pace": "realtime", "speed": SLOW_SPEED}
    running = await start_server(service_settings(engine_options=options))
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


async def heard(run: PageRun, within_s: float) -> float:
    """Waits until the browser has counted the answer's audio on the remote track (its total
    energy: silence counts none, and the answer starts with the silence before the question);
    returns it."""
    return float(
        await run.until(f"() => omni.heardEnergy().then((e) => e > {HEARD} && e)", within_s)
    )


async def test_a_spoken_question_is_answered_on_the_track_and_survives_a_cut_call(
    paced_service: RunningServer, tmp_path: Path
) -> None:
    # The page's default carrier: nothing in the query names one.
    mic = speech_wav(tmp_path, "mic", [0.3, LONG_SPEECH, 4.0])
    async with running_bridge(paced_service) as port, chromium_page(mic) as run:
        await run.page.goto(f"http://127.0.0.1:{port}/")
        await run.page.click("#start")
        await run.until("() => omni.status === 'live'", 15)
        shown = await run.page.text_content("#carrier-used")
        chosen = await run.page.evaluate("[omni.carrier, document.querySelector('#carrier').value]")
        # The turn's answer starts on the track, and is heard there.
        rid = await run.until(
            """() => Object.entries(omni.responses)
                .filter(([, r]) => r.firstAudioAt !== null && !r.audioEnded)
                .map(([id]) => id)[0]""",
            30,
        )
        await heard(run, 10)
        # Not yet played out: the cut below comes in the middle of the answer.
        mid_answer = await run.page.evaluate("(id) => !omni.responses[id].audioEnded", rid)
        await run.screenshot("page_webrtc")
        # The network drops mid-answer: the page offers again with the session's token.
        session_id = await run.page.evaluate("omni.sessionId")
        await run.page.evaluate("omni.dropSocket()")
        await run.until("() => omni.status === 'reconnecting'", 5)
        await run.until("() => omni.resumes === 1 && omni.status !== 'reconnecting'", 20)
        await run.until(
            "(id) => { const r = omni.responses[id]; return r.done && r.audioEnded"
            " && omni.acked[id]; }",
            30,
            rid,
        )
        # Still heard on the new call's track.
        await heard(run, 10)
        state = await run.page.evaluate("omni")
        rows = await table_rows(run)
        assistant_lines = await run.page.locator(
            f'#transcript p.assistant[data-id="{rid}"]'
        ).count()
        said = await run.page.text_content(f'#transcript p.assistant[data-id="{rid}"] .words')
        # Stop: the session closes on the service, and the call with it.
        await run.page.click("#stop")
        await run.until("() => omni.status === 'closed'", 10)
        await eventually(lambda: len(paced_service.registry) == 0, timeout_s=5.0)
        badge = await run.page.text_content("#status")

    assert run.problems == [] and state["errors"] == [], (run.problems, state["errors"])
    assert chosen == ["webrtc", "webrtc"] and shown == "over WebRTC", (chosen, shown)
    assert mid_answer
    assert state["sessionId"] == session_id and state["resumes"] == 1
    states = state["states"]
    assert states[:3] == ["idle", "connecting", "live"], states
    assert states[3:5] == ["reconnecting", "resumed"] and "closed" not in states, states
    assert badge is not None and badge.startswith("closed"), badge
    reply = state["responses"][rid]
    # The answer's words across the cut: every piece once, in order, on one line.
    assert reply["status"] == "completed" and ECHO_WORDS.fullmatch(reply["transcript"]), reply
    assert said == reply["transcript"] and assistant_lines == 1
    # Its audio came on the track, none as events; the bridge said what left on the track.
    assert reply["deltas"] == [] and reply["playedMs"] > 0, reply
    assert state["acked"][rid]["played_ms"] == reply["playedMs"]
    # The latency row: first audio is output_audio_buffer.started, timed from the turn's end.
    assert reply["clientLatencyMs"] > 0 and reply["serverLatencyMs"] > 0, reply
    assert all(rows[rid][column].endswith(" ms") for column in LATENCY_COLUMNS), rows[rid]


async def test_a_typed_turn_over_an_answer_cuts_it_on_the_call(
    slow_service: RunningServer, tmp_path: Path
) -> None:
    """Typing over an answer that plays on the track cuts it: the track stops, the reply being
    made is cancelled (on a call the output buffer is the bridge's, and clearing it stops no
    generation), and the new turn is answered."""
    quiet = speech_wav(tmp_path, "quiet", [1.0])
    async with running_bridge(slow_service) as port, chromium_page(quiet) as run:
        await run.page.goto(f"http://127.0.0.1:{port}/?carrier=webrtc")
        await run.page.click("#start")
        await run.until("() => omni.status === 'live'", 15)
        await run.page.fill("#text", TYPED)
        await run.page.press("#text", "Enter")
        interrupted = await run.until(
            """() => { const [id, r] = Object.entries(omni.responses).pop() || [];
                return r && r.firstAudioAt !== null && !r.done && id; }""",
            15,
        )
        await run.page.fill("#text", RETYPED)
        await run.page.press("#text", "Enter")
        typed_reply = await run.until(
            """(text) => Object.entries(omni.responses)
                .filter(([, r]) => r.done && r.audioEnded
                    && r.transcript.includes(`you wrote "${text}"`))
                .map(([id]) => id)[0]""",
            15,
            RETYPED,
        )
        await run.until("(id) => omni.acked[id]", 10, interrupted)
        cut_note = await run.page.text_content(f'#transcript p.cut[data-id="{interrupted}"] .note')
        state: dict[str, Any] = await run.page.evaluate("omni")
        rows = await table_rows(run)

    assert run.problems == [] and state["errors"] == [], (run.problems, state["errors"])
    cut = state["responses"][interrupted]
    assert cut["status"] == "cancelled" and cut["audioEnded"], cut
    # What the bridge sent on the track before the cut, and no more, is what the history keeps.
    assert state["acked"][interrupted]["truncate"] and 0 < cut["playedMs"] < TYPED_TONE_MS, cut
    assert cut_note is not None and cut_note.startswith("cut at"), cut_note
    heard_cell = rows[interrupted][2]
    assert heard_cell == f"{math.floor(cut['playedMs'] + 0.5)} ms heard", heard_cell
    assert all(rows[typed_reply][column].endswith(" ms") for column in LATENCY_COLUMNS)


@pytest.mark.slow
async def test_a_turn_ended_by_server_vad_is_answered_over_webrtc(tmp_path: Path) -> None:
    """The embedded engine hears the end of the turn in the track's audio: the page learns it
    from ``speech_stopped``, shows the words heard, and times the answer that plays on the
    track from the moment that speech was captured."""
    mic = speech_wav(tmp_path, "mic", [0.5, LONG_SPEECH, 5.0])
    options = {"responder": "echo", "pace": "realtime"}
    running = await start_server(service_settings(engine="embedded", engine_options=options))
    try:
        async with running_bridge(running) as port, chromium_page(mic) as run:
            await run.page.goto(f"http://127.0.0.1:{port}/?carrier=webrtc")
            await run.page.click("#start")
            rid = await run.until(
                """() => Object.entries(omni.responses)
                    .filter(([, r]) => r.firstAudioAt !== null && !r.audioEnded)
                    .map(([id]) => id)[0]""",
                60,
            )
            await heard(run, 20)
            await run.until("(id) => omni.responses[id].done && omni.acked[id]", 60, rid)
            state: dict[str, Any] = await run.page.evaluate("omni")
            rows = await table_rows(run)
            said = await run.page.text_content("#transcript p.you.spoken .words")
            await run.screenshot("page_webrtc_server_vad")
    finally:
        await running.stop()

    assert run.problems == [] and state["errors"] == [], (run.problems, state["errors"])
    assert state["carrier"] == "webrtc" and not state["clientTurns"]
    # The question was heard: its words came back from the track's audio.
    assert state["userTranscripts"] and said == state["userTranscripts"][0]
    assert "test" in said.lower(), said  # Whisper's words for the spoken question
    reply = state["responses"][rid]
    assert reply["deltas"] == [] and reply["playedMs"] > 0, reply
    assert reply["clientLatencyMs"] > 0 and reply["serverLatencyMs"] > 0, reply
    assert all(rows[rid][column].endswith(" ms") for column in LATENCY_COLUMNS), rows[rid]
