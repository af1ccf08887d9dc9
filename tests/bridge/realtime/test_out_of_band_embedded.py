"""An out-of-band response on the embedded engine through the real bridge: it reads its own input
(a reference to a user item Whisper wrote down, and a text item), answers in text through the echo
responder, and the conversation keeps waiting for its own answer; every frame is checked against
OpenAI's types."""

from __future__ import annotations

import base64

import pytest

from tests.bridge.testkit import embedded_bridge, realtime_socket, speech_pcm24

pytestmark = [pytest.mark.model, pytest.mark.subprocess]  # its models; espeak-ng speaks


async def test_an_out_of_band_answer_reads_its_input_and_the_turn_still_waits() -> None:
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
        heard = (await ws.until("conversation.item.done", wait_s=60))[-1]["item"]

        question = {"type": "input_text", "text": "Is this about the weather?"}
        await ws.send(
            {
                "type": "response.create",
                "response": {
                    "conversation": "none",
                    "metadata": {"purpose": "topic"},
                    "output_modalities": ["text"],
                    "max_output_tokens": 64,
                    "input": [
                        {"type": "message", "role": "user", "content": [question]},
                        {"type": "item_reference", "id": heard["id"]},
                    ],
                },
            }
        )
        side = await ws.until("response.done", wait_s=60)
        done = side[-1]["response"]
        assert done["conversation_id"] is None and done["metadata"] == {"purpose": "topic"}
        assert not [e for e in side if e["type"].startswith("conversation.item.")]
        # The echo responder says back the last user turn it was given: the referenced item.
        text = done["output"][0]["content"][0]["text"].lower()
        assert "paris" in text and "weather?" not in text, text

        # The conversation's own response still answers the item, which waited.
        await ws.send({"type": "response.create"})
        answer = await ws.until("response.done", wait_s=60)
        spoken = [e for e in answer if e["type"] == "response.output_audio_transcript.done"]
        assert "paris" in spoken[0]["transcript"].lower()
        assert answer[-1]["response"]["metadata"] is None
