"""The OpenAI dialect against OpenAI's own GA types, through the real bridge and service.

Every frame a socket receives is checked strictly (``tests.bridge.testkit.check_server_event``: the
GA model of its type, no coercion, no undocumented field at any depth); a socket that did not
ask for the duplex extensions must get none of them. The conversations run at every input
format and rate the service accepts, and the loopback engine's answer (the turn said back at
24 kHz) shows the session used the rate it reported.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from omni_grpc import audio
from omni_grpc.core import Limits
from omni_grpc.wire import pb
from tests.bridge.testkit import (
    WITH_EXTENSIONS,
    RealtimeSocket,
    realtime_socket,
    running_bridge,
    service_settings,
)
from tests.serving import serving

PCM16, F32, ULAW = pb.AUDIO_ENCODING_PCM16, pb.AUDIO_ENCODING_PCM_F32, pb.AUDIO_ENCODING_G711_ULAW
# Each input a client may choose: the format object it sends, the encoding and rate it means,
# and the format object session.updated must show (GA's own where GA can say it).
INPUTS = {
    "pcm16-8k": ({"type": "audio/pcm", "rate": 8000}, PCM16, 8000),
    "pcm16-16k": ({"type": "audio/pcm", "rate": 16000}, PCM16, 16000),
    "pcm16-24k": ({"type": "audio/pcm", "rate": 24000}, PCM16, 24000),
    "pcm16-48k": ({"type": "audio/pcm", "rate": 48000}, PCM16, 48000),
    "f32-16k": ({"type": "audio/pcm-f32le", "rate": 16000}, F32, 16000),
    "g711-ulaw": ({"type": "audio/pcmu"}, ULAW, 8000),
}
SHOWN = {
    "pcm16-8k": {"type": "audio/pcm", "sample_rate_hz": 8000},
    "pcm16-16k": {"type": "audio/pcm", "sample_rate_hz": 16000},
    "pcm16-24k": {"type": "audio/pcm", "rate": 24000},
    "pcm16-48k": {"type": "audio/pcm", "sample_rate_hz": 48000},
    "f32-16k": {"type": "audio/pcm", "encoding": "pcm_f32le", "sample_rate_hz": 16000},
    "g711-ulaw": {"type": "audio/pcmu"},
}


def encoded(speech24: bytes, encoding: pb.AudioEncoding.ValueType, rate: int) -> bytes:
    samples = audio.decode(speech24, PCM16, 24000)
    return audio.encode(audio.resample(samples, 24000, rate), encoding, rate)


async def spoken_turn(ws: RealtimeSocket, name: str, speech24: bytes) -> list[dict[str, Any]]:
    """Configures the input, says the speech in 100 ms appends, commits and asks for an
    answer with metadata; returns every event up to response.done."""
    fmt, encoding, rate = INPUTS[name]
    await ws.until("session.created")
    update = {"type": "realtime", "audio": {"input": {"format": fmt, "turn_detection": None}}}
    await ws.send({"type": "session.update", "session": update})
    updated = (await ws.until("session.updated"))[-1]
    assert updated["session"]["audio"]["input"]["format"] == SHOWN[name]
    assert updated["session"]["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
    pcm = encoded(speech24, encoding, rate)
    step = len(pcm) * 100 // (len(speech24) // 48)  # bytes per 100 ms
    for start in range(0, len(pcm), step):
        chunk = base64.b64encode(pcm[start : start + step]).decode()
        await ws.send({"type": "input_audio_buffer.append", "audio": chunk})
    await ws.send({"type": "input_audio_buffer.commit"})
    await ws.send({"type": "response.create", "response": {"metadata": {"turn": name}}})
    return await ws.until("response.done", wait_s=30)


@pytest.mark.parametrize("name", INPUTS)
async def test_every_frame_validates_at_every_input_format_and_rate(
    bridge_port: int, speech: bytes, name: str
) -> None:
    async with realtime_socket(bridge_port) as ws:
        events = await spoken_turn(ws, name, speech)
    received = ws.received
    types = [e["type"] for e in received]
    assert "error" not in types, [e for e in received if e["type"] == "error"]
    assert not [e for e in received if "server_event_seq" in e]
    created = received[0]
    assert not {"resume_token", "capabilities", "attachment_generation"} & created.keys()

    # The turn was heard at the rate the session reported: the loopback says it back.
    reply = b"".join(
        base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta"
    )
    assert abs(len(reply) / 48 - len(speech) / 48) < 40, (len(reply) / 48, len(speech) / 48)

    # The assistant's item follows the user's; the response returns its metadata.
    committed = next(e for e in received if e["type"] == "input_audio_buffer.committed")
    added = [
        e
        for e in received
        if e["type"] == "conversation.item.added" and e["item"]["role"] == "assistant"
    ]
    assert [e["previous_item_id"] for e in added] == [committed["item_id"]]
    [done] = [
        e
        for e in received
        if e["type"] == "conversation.item.done" and e["item"]["role"] == "assistant"
    ]
    assert done["previous_item_id"] == committed["item_id"]
    response = events[-1]["response"]
    assert response["metadata"] == {"turn": name}
    created_response = next(e for e in received if e["type"] == "response.created")["response"]
    assert created_response["metadata"] == {"turn": name}
    assert response["usage"]["input_token_details"] == {"cached_tokens": 0}
    assert response["usage"]["total_tokens"] == (
        response["usage"]["input_tokens"] + response["usage"]["output_tokens"]
    )


async def test_a_client_that_asks_gets_the_extensions_and_every_frame_still_validates(
    bridge_port: int, speech: bytes
) -> None:
    async with realtime_socket(bridge_port, WITH_EXTENSIONS) as ws:
        events = await spoken_turn(ws, "pcm16-16k", speech)
        # OpenAI follows every response.done with the limits; the response.done carries the
        # group's seq, so a client that stops reading there has its cursor past the response.
        [limits] = await ws.until("rate_limits.updated")
        await ws.send({"type": "session.heartbeat"})
        assert (await ws.recv())["type"] == "session.heartbeat_ack"
    created = ws.received[0]
    assert created["resume_token"] and created["capabilities"]["supports_resume"]
    assert created["session"]["overlap_policy"] == "listen_only"
    assert events[-1]["server_event_seq"] > 0 and "server_event_seq" not in limits
    assert "latency" in events[-1]["response"]


async def test_without_asking_no_extension_event_comes(bridge_port: int) -> None:
    async with realtime_socket(bridge_port) as ws:
        await ws.until("session.created")
        # Extension commands still work, but their extension answers are not sent: the next
        # event is the refusal of the empty commit that follows the heartbeat.
        await ws.send({"type": "session.heartbeat"})
        await ws.send({"type": "input_audio_buffer.commit", "event_id": "empty"})
        refusal = await ws.recv()
        assert refusal["error"]["code"] == "input_audio_buffer_empty"
        await ws.send({"type": "session.close"})
        assert await ws.closed() == (1000, "session_closed")  # no session.closed event


async def test_semantic_vad_is_accepted_and_the_rest_of_the_update_applies(
    bridge_port: int,
) -> None:
    # OpenAI's agents SDKs send semantic_vad by default. The loopback engine has no voice
    # activity detector, so the session resolves it to client commits and says so.
    async with realtime_socket(bridge_port) as ws:
        await ws.until("session.created")
        session = {
            "type": "realtime",
            "instructions": "Answer briefly.",
            "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}},
        }
        await ws.send({"type": "session.update", "session": session})
        updated = await ws.recv()
    assert updated["type"] == "session.updated", updated
    assert updated["session"]["instructions"] == "Answer briefly."
    assert updated["session"]["audio"]["input"]["turn_detection"] is None


@pytest.mark.parametrize("query", ["model=loopback-test", WITH_EXTENSIONS])
async def test_a_full_service_is_a_rate_limit_error_with_its_retry_hint(query: str) -> None:
    limits = Limits(disconnect_grace_s=5.0, max_sessions=1)
    async with (
        serving(service_settings(limits=limits)) as service,
        running_bridge(service.target) as port,
        realtime_socket(port) as first,
    ):
        await first.until("session.created")
        async with realtime_socket(port, query) as second:
            refused = await second.recv()
            limit = await second.recv()
            closed = await second.closed()
    body = refused["error"]
    assert (body["type"], body["code"]) == ("rate_limit_error", "resource_exhausted")
    assert "try again in" in body["message"]
    assert limit["type"] == "rate_limits.updated"
    [bucket] = limit["rate_limits"]
    assert bucket["name"] == "requests" and bucket["remaining"] == 0
    assert bucket["reset_seconds"] > 0
    assert ("retry_after_ms" in body) == second.extensions
    if second.extensions:
        assert body["retry_after_ms"] == round(bucket["reset_seconds"] * 1000)
    assert closed[0] == 1013


@pytest.mark.parametrize(
    ("event", "param"),
    [
        (
            {"type": "session.update", "session": {"audio": {"output": {"speed": 1.5}}}},
            "session.audio.output.speed",
        ),
        ({"type": "session.update", "session": {"prompt": {"id": "pmpt_1"}}}, "session.prompt"),
        (
            {"type": "response.create", "response": {"conversation": "conv_elsewhere"}},
            "response.conversation",
        ),
        (
            {
                "type": "response.create",
                "response": {"audio": {"output": {"format": {"type": "audio/pcmu"}}}},
            },
            "response.audio.output.format",
        ),
    ],
)
async def test_a_field_that_cannot_be_honoured_is_an_error_naming_it(
    bridge_port: int, event: dict[str, Any], param: str
) -> None:
    async with realtime_socket(bridge_port) as ws:
        await ws.until("session.created")
        # Instructions ride along: a refused update is refused whole, not applied in part.
        if event["type"] == "session.update":
            event["session"]["instructions"] = "Never applied."
        await ws.send({**event, "event_id": "asks-too-much"})
        refusal = await ws.recv()
        assert refusal["type"] == "error", refusal
        assert (refusal["error"]["code"], refusal["error"]["param"]) == ("unsupported_field", param)
        assert refusal["error"]["event_id"] == "asks-too-much"
        # The socket goes on, and the session is as it was.
        await ws.send({"type": "session.update", "session": {"type": "realtime"}})
        updated = await ws.recv()
        assert updated["type"] == "session.updated"
        assert "instructions" not in updated["session"]


async def test_what_openais_agents_send_by_default_is_accepted(bridge_port: int) -> None:
    # @openai/agents-realtime's default session (DEFAULT_OPENAI_REALTIME_SESSION_CONFIG), then
    # its tracing update: no field of it asks for anything the service cannot do.
    session = {
        "type": "realtime",
        "instructions": "Answer briefly.",
        "output_modalities": ["audio"],
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "noise_reduction": None,
                "transcription": {"model": "gpt-4o-mini-transcribe"},
                "turn_detection": {"type": "semantic_vad"},
            },
            "output": {"format": {"type": "audio/pcm", "rate": 24000}, "speed": 1},
        },
        "tool_choice": "auto",
    }
    async with realtime_socket(bridge_port) as ws:
        await ws.until("session.created")
        await ws.send({"type": "session.update", "session": session})
        await ws.send(
            {"type": "session.update", "session": {"type": "realtime", "tracing": "auto"}}
        )
        first, second = await ws.recv(), await ws.recv()
    assert (first["type"], second["type"]) == ("session.updated", "session.updated")
    assert second["session"]["instructions"] == "Answer briefly."


async def test_every_command_of_a_stock_client_is_answered_in_ga_events(
    bridge_port: int, speech: bytes
) -> None:
    """Typed items, retrieve, truncate, delete, clear: every answer validates strictly and none
    of them is an extension (cancel: the next test)."""
    async with realtime_socket(bridge_port) as ws:
        await ws.until("session.created")
        text = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "hi"}],
        }
        await ws.send({"type": "conversation.item.create", "item": {**text, "id": "typed"}})
        await ws.until("conversation.item.done")
        await ws.send({"type": "conversation.item.retrieve", "item_id": "typed"})
        retrieved = (await ws.until("conversation.item.retrieved"))[-1]
        assert retrieved["item"]["id"] == "typed"
        await ws.send({"type": "response.create"})
        done = (await ws.until("response.done", wait_s=30))[-1]
        answer = done["response"]["output"][0]["id"]
        await ws.send(
            {
                "type": "conversation.item.truncate",
                "item_id": answer,
                "content_index": 0,
                "audio_end_ms": 10,
            }
        )
        await ws.until("conversation.item.truncated")
        await ws.send({"type": "conversation.item.delete", "item_id": "typed"})
        await ws.until("conversation.item.deleted")
        chunk = base64.b64encode(speech[:4800]).decode()
        await ws.send({"type": "input_audio_buffer.append", "audio": chunk})
        await ws.send({"type": "input_audio_buffer.clear"})
        await ws.until("input_audio_buffer.cleared")
    assert "error" not in [e["type"] for e in ws.received]


@pytest.mark.parametrize("path", ["grpc", "in_process"])
async def test_a_cancelled_answer_ends_cancelled_in_ga_events(path: str, speech: bytes) -> None:
    """A long answer (3 s said back in real time), cancelled as soon as it starts: it ends
    cancelled, with GA's status details. (At the suite's fast pace the whole answer may be made
    before the cancel arrives, so this service says it back in real time.)"""
    realtime = service_settings(engine_options={"pace": "realtime"})
    async with serving(realtime) as service:
        target = service if path == "in_process" else service.target
        async with running_bridge(target) as port, realtime_socket(port) as ws:
            await ws.until("session.created")
            await ws.send(
                {"type": "input_audio_buffer.append", "audio": base64.b64encode(speech).decode()}
            )
            await ws.send({"type": "input_audio_buffer.commit"})
            await ws.send({"type": "response.create"})
            await ws.until("response.created")
            await ws.send({"type": "response.cancel"})
            cancelled = (await ws.until("response.done", wait_s=30))[-1]["response"]
    assert cancelled["status"] == "cancelled", cancelled
    assert cancelled["status_details"]["type"] == "cancelled", cancelled
    assert "error" not in [e["type"] for e in ws.received]


@pytest.mark.slow
async def test_semantic_vad_on_an_engine_with_vad_ends_the_turn_by_itself(speech: bytes) -> None:
    """The embedded engine has a voice activity detector: semantic_vad becomes it, with the
    eagerness's silence, and a spoken turn is detected, transcribed and answered, every frame
    in GA events."""
    options = {"responder": "echo", "pace": "fast"}
    async with (
        serving(service_settings(engine="embedded", engine_options=options)) as service,
        running_bridge(service.target) as port,
        realtime_socket(port) as ws,
    ):
        await ws.until("session.created", wait_s=60)
        vad = {"type": "semantic_vad", "eagerness": "high"}
        audio_in = {"turn_detection": vad, "transcription": {"model": "whisper-1"}}
        await ws.send({"type": "session.update", "session": {"audio": {"input": audio_in}}})
        updated = (await ws.until("session.updated", wait_s=30))[-1]
        detector = updated["session"]["audio"]["input"]["turn_detection"]
        assert (detector["type"], detector["silence_duration_ms"]) == ("server_vad", 300)
        pcm = speech + bytes(48_000)  # a second of silence after the words
        for start in range(0, len(pcm), 4800):
            chunk = base64.b64encode(pcm[start : start + 4800]).decode()
            await ws.send({"type": "input_audio_buffer.append", "audio": chunk})
        await ws.until("response.done", wait_s=120)
    types = [e["type"] for e in ws.received]
    assert "error" not in types
    for kind in (
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.completed",
    ):
        assert kind in types, kind
