"""A user item created with its audio, on the embedded engine through the real bridge: Whisper
writes it down as it writes down a committed turn, and the echo responder answers its words;
every frame is checked against OpenAI's types."""

from __future__ import annotations

import base64

import pytest

from tests.bridge.testkit import embedded_bridge, realtime_socket, speech_pcm24

pytestmark = [pytest.mark.model, pytest.mark.subprocess]  # its models; espeak-ng speaks


async def test_an_audio_item_is_transcribed_and_answered() -> None:
    speech = speech_pcm24("the weather in paris is sunny today")
    async with embedded_bridge() as port, realtime_socket(port, "model=embedded") as ws:
        await ws.until("session.created", wait_s=60)
        await ws.send(
            {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}
        )
        await ws.until("session.updated", wait_s=30)
        part = {"type": "input_audio", "audio": base64.b64encode(speech).decode()}
        item = {"type": "message", "role": "user", "content": [part]}
        await ws.send({"type": "conversation.item.create", "item": item})
        events = await ws.until("conversation.item.done", wait_s=60)
        added, done = events[0], events[-1]
        assert added["type"] == "conversation.item.added"
        (transcribed,) = [
            e
            for e in events
            if e["type"] == "conversation.item.input_audio_transcription.completed"
        ]
        assert transcribed["item_id"] == added["item"]["id"]
        words = transcribed["transcript"].lower()
        assert "paris" in words and "sunny" in words, words
        assert done["item"]["content"][0]["transcript"] == transcribed["transcript"]

        await ws.send({"type": "response.create"})
        answer = await ws.until("response.done", wait_s=60)
        spoken = [e for e in answer if e["type"] == "response.output_audio_transcript.done"]
        assert "paris" in spoken[0]["transcript"].lower()  # the echo responder says it back
