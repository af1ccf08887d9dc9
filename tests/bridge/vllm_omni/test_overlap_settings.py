"""vLLM-Omni's overlap settings through the real bridge: ``overlap_barge_in_ms`` is the
contract's ``interruption.min_duration_ms`` (one model of overlap for both dialects), so on the
embedded engine speech over a reply shorter than it is dropped and the reply plays on."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from omni_grpc import audio
from omni_grpc.wire import pb
from tests.bridge.testkit import embedded_bridge, speech_pcm24
from tests.bridge.vllm_omni.test_endpoint import duplex_socket, recv, send

CHUNK_MS = 100
BYTES_PER_MS = 32  # pcm16 mono at 16 kHz, the reference's input
OPEN = {
    "type": "session.update",
    "session": {
        "input_audio_format": "pcm16",
        "sample_rate_hz": 16000,
        "turn_detection": {"type": "server_vad"},
        "overlap_policy": "barge_in_on_speech",
        "overlap_barge_in_ms": 1200,
    },
}


async def until(ws: Any, kind: str, wait_s: float = 60.0) -> list[dict[str, Any]]:
    events = []
    async with asyncio.timeout(wait_s):
        while True:
            events.append(await recv(ws, wait_s))
            if events[-1]["type"] == kind:
                return events


def pcm16k(text: str) -> bytes:
    samples = audio.decode(speech_pcm24(text), pb.AUDIO_ENCODING_PCM16, 24000)
    return audio.encode(audio.resample(samples, 24000, 16000), pb.AUDIO_ENCODING_PCM16, 16000)


@pytest.mark.model
@pytest.mark.subprocess
async def test_overlap_barge_in_ms_is_the_contracts_min_duration() -> None:
    async with embedded_bridge() as port, duplex_socket(port) as ws:
        await send(ws, OPEN)
        session = (await until(ws, "session.updated"))[-1]["session"]
        assert session["overlap_barge_in_ms"] == 1200
        assert session["interruption"]["mode"] == "speech"
        assert session["interruption"]["min_duration_ms"] == 1200

        text = "Tell me about the sea and the ships that sail on it at night."
        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }
        await send(ws, {"type": "conversation.item.create", "item": item})
        await send(ws, {"type": "response.create"})
        await until(ws, "response.output_audio.delta")
        pcm = bytes(300 * BYTES_PER_MS) + pcm16k("okay") + bytes(1000 * BYTES_PER_MS)
        for start in range(0, len(pcm), CHUNK_MS * BYTES_PER_MS):
            chunk = base64.b64encode(pcm[start : start + CHUNK_MS * BYTES_PER_MS]).decode()
            await send(ws, {"type": "input_audio_buffer.append", "audio": chunk})
            await asyncio.sleep(CHUNK_MS / 1000)
        events = await until(ws, "response.done")
    decisions = [e for e in events if e["type"] == "overlap.decision"]
    assert [(d["action"], d["reason"]) for d in decisions] == [("drop", "too_short")]
    assert events[-1]["response"]["status"] == "completed"


async def test_an_engine_that_cannot_judge_overlap_refuses_the_setting(bridge_port: int) -> None:
    """The loopback engine has no voice activity detector: the setting is refused, typed."""
    async with duplex_socket(bridge_port) as ws:
        await send(ws, {**OPEN, "session": {"overlap_barge_in_ms": 1200}})
        events = await until(ws, "error", wait_s=10)
    assert events[-1]["error"]["code"] == "unsupported_interruption"
