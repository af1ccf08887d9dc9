"""The turn-taking benchmark through the websocket bridge, with the ``openai`` SDK's realtime
client, against a real service (the embedded engine): the driver hears over GA events (and the
extensions, for judged interruptions) what it hears over gRPC. Structure and observations only:
the timings depend on the machine."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import turn_score
from bench_turns import SETTINGS
from turn_bridge import BridgeTransport
from turn_driver import Record, play
from turn_set import dialogues

from tests.bridge.testkit import embedded_bridge

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
# Its models; espeak-ng speaks the set; the CLI test runs the benchmark as a child.
pytestmark = [pytest.mark.model, pytest.mark.subprocess, pytest.mark.slow]


def _kinds(record: Record) -> set[str]:
    return {e.kind for e in record.events}


def _reply_audio(record: Record) -> list[tuple[float, float]]:
    reply = turn_score._reply(record)
    return [
        (e.start_ms, e.duration_ms)
        for e in record.events
        if e.response_id == reply and e.kind == "audio"
    ]


@pytest.mark.timeout(300)
async def test_the_bridge_transport_observes_a_stock_and_an_extension_socket() -> None:
    complete, backchannel = (
        next(d for d in dialogues(1) if d.kind == k) for k in ("complete", "backchannel")
    )
    async with embedded_bridge() as port:
        target = f"127.0.0.1:{port}"
        stock = await play(complete, SETTINGS["fixed 500 ms"], BridgeTransport(target))
        stock_cut = await play(backchannel, SETTINGS["fixed 500 ms"], BridgeTransport(target))
        judged = await play(backchannel, SETTINGS["fixed 500 ms judged"], BridgeTransport(target))
    for record in (stock, stock_cut, judged):
        assert not record.failure, record.failure
        assert "error" not in _kinds(record), [e.text for e in record.events if e.kind == "error"]

    # A stock socket: GA events only, the turn's end and its words, the answer's audio placed
    # from its bytes one delta after another from 0, after the end of speech.
    assert not _kinds(stock) & {"overlap", "turn_end"}
    (stopped,) = [e for e in stock.events if e.kind == "speech_stopped"]
    assert 0 < stopped.audio_end_ms <= complete.before.duration_ms
    assert "france" in next(e.text for e in stock.events if e.kind == "transcript").lower()
    audio = _reply_audio(stock)
    assert audio and audio[0][0] == 0.0
    assert all(abs(a + d - b) < 1e-6 for (a, d), (b, _) in itertools.pairwise(audio))
    assert turn_score.first_audio_ms(stock) is not None

    # OpenAI's interruptions: a backchannel ends the reply, as GA's cancelled response.done.
    assert turn_score.reply_cut(stock_cut) and turn_score.stop_ms(stock_cut) is not None
    assert "overlap" not in _kinds(stock_cut)

    # Judged, on an extension socket: the reply paused at once, then resumed from where the
    # client stopped playing it (its ack), with no audio repeated or lost.
    reply = turn_score._reply(judged)
    actions = [e.action for e in judged.events if e.kind == "overlap" and e.response_id == reply]
    assert actions[:2] == ["pause", "resume"], actions
    assert not turn_score.reply_cut(judged)
    assert turn_score.resume_ms(judged) is not None
    assert judged.resume_errors_ms and all(abs(ms) <= 1.0 for ms in judged.resume_errors_ms)


@pytest.mark.timeout(300)
def test_bench_turns_runs_through_the_bridge() -> None:
    """``--transport bridge``: the benchmark starts ``omni-grpc serve`` with its bridge on a
    port of its own and prints its table as over gRPC."""
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "bench_turns.py"),
            "--transport",
            "bridge",
            "--settings",
            "fixed 500 ms",
            "--kinds",
            "complete",
            "--per-kind",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(
        r"complete: 'what is the capital of france'; first audio \d+ ms$", result.stderr, re.M
    )
    assert "through the bridge (openai SDK)" in result.stdout
    blocks = [block.splitlines() for block in result.stdout.split("\n\n")]
    table, timing = [block for block in blocks if block and block[0].startswith("|")]
    assert table[0] == "| " + " | ".join(turn_score.HEADER) + " |"
    (row,) = table[2:]
    # Where the turn's time went: one row, timed from the end of speech.
    assert timing[0] == "| " + " | ".join(turn_score.TIMING_HEADER) + " |"
    (timed,) = timing[2:]
    assert re.match(
        r"\| complete: what is the capital of france \| — \| — \| — \| \d+ \| \d+ \| \d+ \|$",
        timed,
    ), timed
    assert re.match(
        r"\| fixed 500 ms \| — \| — \| \d+ / \d+ \| — \| — / — \| — \| — / — \| 0 \|$", row
    ), row
