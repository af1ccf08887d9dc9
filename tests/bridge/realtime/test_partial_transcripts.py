"""Words of a user turn while it is spoken: ``input_transcription_delta`` rendered as OpenAI's
GA ``conversation.item.input_audio_transcription.delta`` (strictly valid, extensions or not),
left out of the vLLM-Omni dialect (its reference sends none), and sent through the real bridge
by the embedded engine during a long turn streamed in real time."""

from __future__ import annotations

import asyncio
import base64

import orjson
import pytest

from bridge.realtime.outbound import RealtimeOutbound
from bridge.vllm_omni.outbound import VllmOmniOutbound
from omni_grpc.wire import pb
from tests.bridge.testkit import (
    check_plain_event,
    check_server_event,
    realtime_socket,
    running_bridge,
    service_settings,
    speech_pcm24,
)
from tests.serving import serving

DELTA = "conversation.item.input_audio_transcription.delta"
LONG = "please book a table for two at seven tonight and remind me to call my sister"


def partial(seq: int, text: str) -> pb.ConverseResponse:
    delta = pb.InputTranscriptionDelta(item_id="item_u1", content_index=0, delta=text)
    return pb.ConverseResponse(seq=seq, input_transcription_delta=delta)


@pytest.mark.parametrize("extensions", [False, True])
def test_a_partial_is_openais_ga_delta_event(extensions: bool) -> None:
    dialect = RealtimeOutbound(extensions=extensions)
    rendered = [orjson.loads(orjson.dumps(e)) for e in dialect.expand(partial(3, "Please book"))]
    (event,) = rendered
    check = check_server_event if extensions else check_plain_event
    check(event)
    assert {k: event[k] for k in ("type", "item_id", "content_index", "delta")} == {
        "type": DELTA,
        "item_id": "item_u1",
        "content_index": 0,
        "delta": "Please book",
    }


def test_the_vllm_omni_dialect_sends_no_partials() -> None:
    assert VllmOmniOutbound().expand(partial(3, "Please book")) == []


@pytest.mark.slow
async def test_the_embedded_engine_sends_words_before_the_turn_ends() -> None:
    """Every frame validates against OpenAI's GA types (the socket checks each one); the
    deltas name the item speech_started announced and come before speech_stopped."""
    options = {"responder": "echo", "pace": "fast"}
    pcm = bytes(24_000) + speech_pcm24(LONG) + bytes(48_000)
    chunk = 960  # 20 ms at 24 kHz
    async with (
        serving(service_settings(engine="embedded", engine_options=options)) as service,
        running_bridge(service.target) as port,
        realtime_socket(port) as ws,
    ):
        await ws.until("session.created", wait_s=60)
        loop = asyncio.get_running_loop()
        began = loop.time()
        for index, start in enumerate(range(0, len(pcm), chunk)):
            audio = base64.b64encode(pcm[start : start + chunk]).decode()
            await ws.send({"type": "input_audio_buffer.append", "audio": audio})
            await asyncio.sleep(max(0.0, began + (index + 1) * 0.02 - loop.time()))
        await ws.until("conversation.item.input_audio_transcription.completed", wait_s=60)
    types = [e["type"] for e in ws.received]
    assert "error" not in types
    deltas = [e for e in ws.received if e["type"] == DELTA]
    assert deltas, types
    started = next(e for e in ws.received if e["type"] == "input_audio_buffer.speech_started")
    assert {e["item_id"] for e in deltas} == {started["item_id"]}
    last_delta = max(index for index, kind in enumerate(types) if kind == DELTA)
    assert last_delta < types.index("input_audio_buffer.speech_stopped")
    assert "".join(e["delta"] for e in deltas).strip()
