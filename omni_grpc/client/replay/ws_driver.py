"""Replaying through the websocket bridge: the plan's commands as OpenAI Realtime client
events (with the duplex extensions), at their recorded offsets.

The session opens with a ``session.update`` of what the dialect can say of the recorded
configuration (formats, instructions, voice, modalities, turn detection, truncation), the input
being pcm16 at the track's rate, so the engine hears what it heard. Each command goes out as the
client event the bridge turns back into it (``bridge/inbound.py`` reads them); what comes back
is kept as the contract's events where a turn is made of them (the rest by their dialect
names), so the report compares turns and pacing. The events themselves are not compared: they
went through another dialect.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import aiohttp
from google.protobuf import json_format

from omni_grpc.client.replay.grpc_driver import SETTLE_S, ReplayFailed, ReplayRun, _wait
from omni_grpc.client.replay.plan import IdMap, Plan
from omni_grpc.client.replay.turns import Step, digest
from omni_grpc.wire import pb

_SIMPLE = {
    "clear_input_audio": "input_audio_buffer.clear",
    "heartbeat": "session.heartbeat",
    "cancel_input": "input.cancel",
    "barge_in": "barge_in",
}
_STATUSES = {
    "completed": "RESPONSE_STATUS_COMPLETED",
    "cancelled": "RESPONSE_STATUS_CANCELLED",
    "failed": "RESPONSE_STATUS_FAILED",
    "incomplete": "RESPONSE_STATUS_INCOMPLETE",
}
_ROLES = {
    "ITEM_ROLE_USER": "user",
    "ITEM_ROLE_ASSISTANT": "assistant",
    "ITEM_ROLE_SYSTEM": "system",
}
_CONTENT = {"CONTENT_TYPE_INPUT_TEXT": "input_text", "CONTENT_TYPE_OUTPUT_TEXT": "output_text"}


def session_patch(config: pb.SessionConfig, rate_hz: int) -> dict[str, Any]:
    """What the dialect can say of the recorded configuration, input as pcm16 at ``rate_hz``."""
    out = config.output_audio_format
    patch: dict[str, Any] = {
        "audio": {
            "input": {"format": {"type": "audio/pcm", "sample_rate_hz": rate_hz}},
            "output": {"format": {"type": "audio/pcm", "sample_rate_hz": out.sample_rate_hz}},
        },
        "output_modalities": [
            "text" if modality == pb.MODALITY_TEXT else "audio"
            for modality in config.output_modalities
        ]
        or ["audio"],
    }
    if config.HasField("instructions"):
        patch["instructions"] = config.instructions
    if config.HasField("voice"):
        patch["audio"]["output"]["voice"] = config.voice
    td = config.turn_detection
    if td.type == pb.TURN_DETECTION_TYPE_NONE:
        patch["audio"]["input"]["turn_detection"] = None
    elif td.type == pb.TURN_DETECTION_TYPE_SERVER_VAD:
        patch["audio"]["input"]["turn_detection"] = {"type": "server_vad"}
    patch.update(_truncation(config))
    return patch


def _truncation(config: pb.SessionConfig) -> dict[str, Any]:
    """GA's ``truncation`` of ``config`` where it sets one the dialect can say (an auto with
    a token limit it cannot: left to the default)."""
    if not config.HasField("truncation"):
        return {}
    truncation = config.truncation
    if truncation.type == pb.TRUNCATION_TYPE_DISABLED:
        return {"truncation": "disabled"}
    if truncation.type == pb.TRUNCATION_TYPE_RETENTION_RATIO:
        shape: dict[str, Any] = {
            "type": "retention_ratio",
            "retention_ratio": truncation.retention_ratio,
        }
        if truncation.HasField("post_instructions_token_limit"):
            shape["token_limits"] = {"post_instructions": truncation.post_instructions_token_limit}
        return {"truncation": shape}
    return {"truncation": "auto"}


def client_event(request: pb.ConverseRequest) -> dict[str, Any] | None:
    """The Realtime client event the bridge reads back as ``request`` (None: it has none)."""
    kind = request.WhichOneof("command") or ""
    inner = getattr(request, kind)
    body = json_format.MessageToDict(inner, preserving_proto_field_name=True)
    event: dict[str, Any] | None
    if kind == "append_input_audio":
        audio = base64.b64encode(inner.audio).decode()
        event = {"type": "input_audio_buffer.append", "audio": audio}
    elif kind == "commit_input_audio":
        event = {"type": "input_audio_buffer.commit", **body}
    elif kind in _SIMPLE:
        event = {"type": _SIMPLE[kind]}
    elif kind in ("clear_output_audio", "cancel_response"):
        name = "output_audio_buffer.clear" if kind == "clear_output_audio" else "response.cancel"
        event = {"type": name, **body}
    elif kind == "create_response":
        options = {k: body[k] for k in ("instructions", "metadata") if k in body}
        event = {"type": "response.create", "response": options}
    elif kind == "create_conversation_item":
        event = {"type": "conversation.item.create", "item": _item(body.get("item", {}))}
        if body.get("previous_item_id"):
            event["previous_item_id"] = body["previous_item_id"]
    elif kind in ("retrieve_conversation_item", "delete_conversation_item"):
        name = kind.removesuffix("_conversation_item")
        event = {"type": f"conversation.item.{name}", **body}
    elif kind == "truncate_conversation_item":
        event = {"type": "conversation.item.truncate", "audio_end_ms": 0.0, **body}
    elif kind == "ack_events":
        event = {"type": "session.event_ack", "server_event_seq": int(body.get("seq", 0))}
    elif kind == "ack_playback":
        event = {"type": "playback.ack", "played_ms": 0.0, **body}
    elif kind == "append_input_text":
        event = {"type": "input_text.append", "text": inner.text}
    elif kind == "close_session":
        event = {"type": "session.close", **body}
    elif kind == "update_session":
        event = {"type": "session.update", "session": _update(inner.config)}
    else:
        event = None
    if event is not None and request.event_id:
        event["event_id"] = request.event_id
    return event


def _item(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type") == "ITEM_TYPE_FUNCTION_CALL_OUTPUT":
        return {"type": "function_call_output", "call_id": item.get("call_id", ""),
                "output": item.get("output", "")}  # fmt: skip
    content = [
        {"type": _CONTENT.get(part.get("type", ""), "input_text"), "text": part.get("text", "")}
        for part in item.get("content", [])
    ]
    made = {"type": "message", "role": _ROLES.get(item.get("role", ""), "user"), "content": content}
    if item.get("id"):
        made["id"] = item["id"]
    return made


def _update(config: pb.SessionConfig) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    if config.HasField("instructions"):
        patch["instructions"] = config.instructions
    if config.HasField("voice"):
        patch["voice"] = config.voice
    patch.update(_truncation(config))
    return patch


def event_step(event: dict[str, Any], t: float) -> Step:
    """A dialect event as the contract's event where turns are made of it."""
    kind, seq = event.get("type", ""), event.get("server_event_seq")
    numbered = "event" if seq else "stream"
    if kind == "response.created":
        response: dict[str, Any] = {"id": event["response"]["id"]}
        if "conversation_id" in event["response"] and event["response"]["conversation_id"] is None:
            response["conversation"] = "RESPONSE_CONVERSATION_NONE"  # out of band
        return Step(t, numbered, "response_created", {"response": response})
    if kind == "response.output_audio.delta":
        audio = base64.b64decode(event.get("delta", ""))
        # duration_ms is an extension field (asked for); else the GA rate, pcm16 at 24 kHz.
        length_ms = event.get("duration_ms", len(audio) / 2 / 24)
        body = {"response_id": event.get("response_id", ""), "duration_ms": length_ms}
        heard = {"bytes": len(audio), "blake2b": digest(audio)}
        return Step(t, numbered, "output_audio_delta", body, heard)
    if kind in ("response.output_audio_transcript.delta", "response.output_text.delta"):
        name = "output_audio_transcript_delta" if "audio" in kind else "output_text_delta"
        body = {"response_id": event.get("response_id", ""), "delta": event.get("delta", "")}
        return Step(t, numbered, name, body)
    if kind == "response.done":
        response = event.get("response", {})
        output = [
            {"content": [{"transcript": part.get("transcript"), "text": part.get("text")}
                         for part in item.get("content", [])]}
            for item in response.get("output", [])
        ]  # fmt: skip
        details = response.get("status_details") or {}
        done = {
            "id": response.get("id", ""),
            "output": output,
            "status": _STATUSES.get(response.get("status", ""), ""),
            "status_reason": details.get("reason", ""),
        }
        return Step(t, numbered, "response_done", {"response": done})
    if kind == "input_audio_buffer.committed":
        return Step(t, numbered, "input_committed", {"item_id": event.get("item_id", "")})
    if kind == "input_audio_buffer.speech_stopped":
        return Step(t, numbered, "speech_stopped", {})
    if kind == "conversation.item.input_audio_transcription.completed":
        body = {"item_id": event.get("item_id", ""), "transcript": event.get("transcript", "")}
        return Step(t, numbered, "input_transcription", body)
    if kind in ("session.closed", "session.expired"):
        return Step(t, numbered, kind.replace(".", "_"), {})
    return Step(t, numbered, kind, {})


async def replay_ws(
    plan: Plan, url: str, *, api_key: str | None = None, settle_s: float = SETTLE_S
) -> ReplayRun:
    """Runs ``plan`` through the bridge at ``url`` (``ws://…/v1/realtime``); raises
    ReplayFailed."""
    run = ReplayRun()
    ids = IdMap(plan.recorded)
    ended = asyncio.Event()
    rate = plan.commands[0].rate_hz if plan.commands else 16000
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    target = url + ("&" if "?" in url else "?") + "extensions=1"
    last_seq = 0
    try:
        async with aiohttp.ClientSession() as http, http.ws_connect(target, headers=headers) as ws:
            opening = {"type": "session.update", "session": session_patch(plan.config, rate)}
            await ws.send_json(opening)
            first = await ws.receive_json(timeout=10)
            if first.get("type") != "session.created":
                raise ReplayFailed(f"the bridge answered the open with {first.get('type')}")
            opened = time.monotonic()
            run.session_id = first.get("session", {}).get("id", "")

            async def read() -> None:
                nonlocal last_seq
                try:
                    async for message in ws:
                        if message.type != aiohttp.WSMsgType.TEXT:
                            break
                        event = message.json()
                        step = event_step(event, time.monotonic())
                        run.steps.append(step)
                        if step.type == "event":
                            ids.saw(step)
                            last_seq = max(last_seq, int(event.get("server_event_seq", 0)))
                        if step.kind in ("session_closed", "session_expired"):
                            run.ended = step.kind
                finally:
                    ended.set()

            reader = asyncio.create_task(read())
            number = 0
            for planned in plan.commands:
                delay = opened + planned.offset_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if ended.is_set():
                    break
                number += planned.numbered
                event = client_event(ids.request(planned, number, last_seq))
                if event is None:
                    continue
                sent = time.monotonic()  # when it is handed to the socket: its send time
                await ws.send_json(event)
                run.pacing.append((planned.kind, planned.offset_s, sent - opened))
                run.steps.append(Step(sent, "command", planned.kind, planned.body))
            quiet = opened + plan.last_event_offset_s + settle_s - time.monotonic()
            if not ended.is_set() and run.pacing and run.pacing[-1][0] != "close_session":
                await _wait(ended, max(quiet, settle_s))
                if not ended.is_set():
                    await ws.send_json({"type": "session.close"})
            await _wait(ended, max(quiet, settle_s) + 10.0)
            reader.cancel()
    except (aiohttp.ClientError, TimeoutError) as error:
        raise ReplayFailed(f"the bridge at {url}: {error}") from None
    return run


__all__ = ["client_event", "event_step", "replay_ws", "session_patch"]
