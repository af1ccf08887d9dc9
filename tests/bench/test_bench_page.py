"""The page benchmark against a real bridge and the embedded engine, in Chromium: each carrier
reads the page's own figure for a spoken request. Structure only: the timings depend on the
machine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench_page import ANSWER_TIMEOUT_S, hear, microphone_wav
from turn_set import dialogues

from tests.bridge.testkit import embedded_bridge

# Its models; espeak-ng and sox make the microphone; Chromium is the page.
pytestmark = [pytest.mark.model, pytest.mark.subprocess, pytest.mark.browser, pytest.mark.slow]
CARRIERS = ("websocket", "webrtc")


@pytest.mark.timeout(300)
async def test_the_page_times_a_spoken_request_on_both_carriers(tmp_path: Path) -> None:
    request = next(d for d in dialogues(1) if d.kind == "complete")
    wav = microphone_wav(tmp_path, "request", request.before.signal)
    async with embedded_bridge() as port:
        base_url = f"http://127.0.0.1:{port}"
        heard = [await hear(base_url, carrier, request.name, wav) for carrier in CARRIERS]
    for one in heard:
        assert one.problems == (), one
        # The page timed an answer after the end of the speech, within the wait.
        assert one.latency_ms is not None and 0 < one.latency_ms < ANSWER_TIMEOUT_S * 1000
