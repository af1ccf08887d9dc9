"""Turn-taking through the real bridge and the embedded engine (Whisper, Silero, SmolLM2 judging
the end of turns, the echo responder): semantic_vad with its eagerness, the idle prompt, and a
reply paused, resumed and cut by speech over it. Speech is espeak-ng's, sent at real-time pace
as a microphone would; every frame is checked against OpenAI's types (or the extensions')."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from omni_grpc.engine.embedded.responder import STILL_THERE
from tests.bridge.testkit import RealtimeSocket, embedded_bridge, realtime_socket, speech_pcm24

pytestmark = [pytest.mark.model, pytest.mark.subprocess]  # its models; espeak-ng speaks

CHUNK_MS = 100
BYTES_PER_MS = 48  # pcm16 mono at 24 kHz
EXTENSIONS = "model=embedded&extensions=1"
# Long enough that the echoed answer still plays while speech is said over it (about 7 s).
LONG_QUESTION = (
    "Please tell me a long story about the sea, the ships that sail on it, the sailors who "
    "steer them through the storms, and the harbours where they rest at night."
)


def silence(ms: int) -> bytes:
    return bytes(ms * BYTES_PER_MS)


async def say(ws: RealtimeSocket, pcm: bytes) -> None:
    """Sends ``pcm`` in 100 ms appends, each when a microphone would have it."""
    step = CHUNK_MS * BYTES_PER_MS
    for start in range(0, len(pcm), step):
        chunk = base64.b64encode(pcm[start : start + step]).decode()
        await ws.send({"type": "input_audio_buffer.append", "audio": chunk})
        await asyncio.sleep(CHUNK_MS / 1000)


async def configured(ws: RealtimeSocket, session: dict[str, Any]) -> dict[str, Any]:
    await ws.until("session.created", wait_s=60)
    await ws.send({"type": "session.update", "session": {"type": "realtime", **session}})
    return (await ws.until("session.updated", wait_s=30))[-1]["session"]


async def ask_in_text(ws: RealtimeSocket, text: str) -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await ws.send({"type": "conversation.item.create", "item": item})
    await ws.send({"type": "response.create"})


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


async def test_semantic_vad_passes_its_eagerness_and_reports_each_judgement() -> None:
    async with embedded_bridge() as port, realtime_socket(port, EXTENSIONS) as ws:
        vad = {"type": "semantic_vad", "eagerness": "high"}
        session = await configured(ws, {"audio": {"input": {"turn_detection": vad}}})
        # The engine judges words: semantic_vad is served as such, not as a silence.
        assert session["audio"]["input"]["turn_detection"] == {
            **vad,
            "create_response": True,
            "interrupt_response": True,
            "idle_timeout_ms": None,
        }
        await say(ws, speech_pcm24("What is the capital of France?") + silence(2500))
        events = await ws.until("response.done", wait_s=60)
    decisions = of(events, "turn_end.decision")
    assert decisions, [e["type"] for e in events]
    (committed,) = of(events, "input_audio_buffer.committed")
    (stopped,) = of(events, "input_audio_buffer.speech_stopped")
    last = decisions[-1]
    assert last["item_id"] == stopped["item_id"] == committed["item_id"]
    assert all(d["eagerness"] == "high" for d in decisions)
    # The ear judges a pause at once and the reader once Whisper has written its words; on a
    # loaded machine the ear's wait may end the turn before the words are read, and then the
    # last decision is the ear's alone (no words, no transcript), as the engine tests allow.
    if last["words_probability"] is None:
        assert last["sound_probability"] is not None and last["transcript"] == ""
    else:
        assert last["transcript"]
    assert 0 < last["wait_ms"] <= 2000  # high eagerness waits 2 s at the most
    # The judgement comes before the turn ends, and the turn ends after its wait.
    assert events.index(last) < events.index(stopped)
    assert stopped["audio_end_ms"] >= last["audio_end_ms"]


async def test_a_silent_stock_client_gets_gas_idle_prompt() -> None:
    async with embedded_bridge() as port, realtime_socket(port, "model=embedded") as ws:
        vad = {"type": "server_vad", "idle_timeout_ms": 1500}
        session = await configured(ws, {"audio": {"input": {"turn_detection": vad}}})
        assert session["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == 1500
        await ask_in_text(ws, "Hello.")
        first = (await ws.until("response.done", wait_s=60))[-1]["response"]["id"]
        microphone = asyncio.create_task(say(ws, silence(8000)))
        try:
            events = await ws.until("input_audio_buffer.timeout_triggered", wait_s=30)
            events += await ws.until("response.done", wait_s=60)
        finally:
            microphone.cancel()
    (triggered,) = of(events, "input_audio_buffer.timeout_triggered")
    assert triggered["audio_end_ms"] - triggered["audio_start_ms"] >= 1500
    after = events[events.index(triggered) :]
    # Then what GA does: the buffer committed as that item, and a response that prompts.
    kinds = [e["type"] for e in after]
    assert kinds.index("input_audio_buffer.committed") < kinds.index("response.created")
    assert of(after, "input_audio_buffer.committed")[0]["item_id"] == triggered["item_id"]
    prompt = after[-1]["response"]
    assert prompt["id"] != first
    assert prompt["output"][0]["content"][0]["transcript"] == STILL_THERE


async def test_a_backchannel_pauses_and_resumes_the_reply_and_words_cut_it() -> None:
    rules = {"mode": "words", "resume_false_interruption": True}
    async with embedded_bridge() as port, realtime_socket(port, EXTENSIONS) as ws:
        session = await configured(
            ws, {"overlap_policy": "barge_in_on_speech", "interruption": rules}
        )
        assert session["interruption"]["mode"] == "words"
        assert session["interruption"]["resume_false_interruption"] is True

        await ask_in_text(ws, LONG_QUESTION)
        await ws.until("response.output_audio.delta", wait_s=60)
        await say(ws, silence(300) + speech_pcm24("yeah") + silence(1200))
        events = await ws.until("response.done", wait_s=60)
        pause, resume = of(events, "overlap.decision")
        reply = events[-1]["response"]
        assert (pause["action"], pause["response_id"]) == ("pause", reply["id"])
        assert (resume["action"], resume["reason"]) == ("resume", "backchannel")
        assert reply["status"] == "completed"
        # Audio after the resume goes on from where the reply was held.
        after = of(events[events.index(resume) :], "response.output_audio.delta")
        assert after and after[0]["start_ms"] == pytest.approx(resume["audio_ms"])

        await ask_in_text(ws, LONG_QUESTION)
        await ws.until("response.output_audio.delta", wait_s=60)
        await say(ws, silence(300) + speech_pcm24("No wait, I meant Tuesday.") + silence(1200))
        events = await ws.until("response.done", wait_s=60)
    pause, cut = of(events, "overlap.decision")[:2]
    assert (pause["action"], cut["action"], cut["reason"]) == ("pause", "barge_in", "min_words")
    cancelled = events[-1]["response"]
    assert cancelled["id"] == cut["response_id"]
    assert (cancelled["status"], cancelled["status_details"]["reason"]) == (
        "cancelled",
        "turn_detected",
    )
    # No audio of the cut reply after it was held.
    held_at = events.index(pause)
    assert not [
        e
        for e in of(events[held_at:], "response.output_audio.delta")
        if e["response_id"] == cancelled["id"]
    ]
