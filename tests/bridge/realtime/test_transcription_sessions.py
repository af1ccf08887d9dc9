"""Transcription sessions through the bridge with the official ``openai`` SDK, in front of a
real service: the loopback engine here (its transcript says how long each turn was, in which
language, with which prompt), the embedded engine's Whisper in test_transcription_embedded.py.

Every frame is validated strictly against OpenAI's own types (``check_plain_event``) and
parsed by the SDK, as in test_openai_sdk.py.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from openai import AsyncOpenAI
from openai.types.realtime import (
    ConversationItemInputAudioTranscriptionCompletedEvent,
    RealtimeAudioConfigInputParam,
)

from omni_grpc import audio
from omni_grpc.audio.wav import read_wav, wav_bytes
from omni_grpc.wire import pb
from tests.bridge.testkit import check_plain_event

RATE_HZ = 24000


def tone_wav(path: Path, seconds: float) -> Path:
    """A WAV file of a quiet tone, pcm16 mono at 24 kHz."""
    t = np.arange(int(RATE_HZ * seconds)) / RATE_HZ
    pcm = audio.encode(0.2 * np.sin(2 * np.pi * 330.0 * t), pb.AUDIO_ENCODING_PCM16, RATE_HZ)
    path.write_bytes(wav_bytes(pcm, RATE_HZ))
    return path


class Recorder:
    """Reads raw frames from an SDK connection, checks each, keeps them in order."""

    def __init__(self, conn: Any, wait_s: float = 10.0) -> None:
        self.conn = conn
        self.wait_s = wait_s
        self.events: list[dict[str, Any]] = []
        self.parsed: list[Any] = []

    async def next(self) -> dict[str, Any]:
        raw = await asyncio.wait_for(self.conn.recv_bytes(), self.wait_s)
        event = orjson.loads(raw)
        check_plain_event(event)
        self.events.append(event)
        self.parsed.append(self.conn.parse_event(raw))
        return event

    async def quiet(self, seconds: float) -> None:
        """Reads (and checks) whatever comes for ``seconds``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while True:
                    await self.next()

    async def until(self, kind: str) -> dict[str, Any]:
        while (event := await self.next())["type"] != kind:
            pass
        return event


async def test_sdk_transcription_session_from_a_wav(bridge_port: int, tmp_path: Path) -> None:
    wav = read_wav(tone_wav(tmp_path / "turn.wav", 1.5).read_bytes())
    client = AsyncOpenAI(api_key="test-key", websocket_base_url=f"ws://127.0.0.1:{bridge_port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        seen = Recorder(conn)
        created = await seen.next()
        assert created["type"] == "session.created"
        await conn.session.update(
            session={
                "type": "transcription",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        # OpenAI's model name: the engine's default model transcribes.
                        "transcription": {
                            "model": "gpt-4o-transcribe",
                            "language": "de",
                            "prompt": "Grüße",
                        },
                        "turn_detection": None,
                    }
                },
                "include": ["item.input_audio_transcription.logprobs"],
            }
        )
        updated = (await seen.until("session.updated"))["session"]
        assert updated["type"] == "transcription"
        assert updated["include"] == ["item.input_audio_transcription.logprobs"]
        assert updated["audio"]["input"]["transcription"] == {
            "model": "loopback-words",
            "language": "de",
            "prompt": "Grüße",
        }
        for start in range(0, len(wav.frames), 4800):  # 100 ms appends, as a microphone's
            chunk = wav.frames[start : start + 4800]
            await conn.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
        await conn.input_audio_buffer.commit()
        completed = await seen.until("conversation.item.input_audio_transcription.completed")
        assert completed["transcript"] == "1.50 seconds of audio in de, prompted 'Grüße'"
        assert [each["token"] for each in completed["logprobs"]][:2] == ["1.50", " seconds"]
        assert completed["usage"] == {"type": "duration", "seconds": 1.5}
        typed = seen.parsed[-1]
        assert isinstance(typed, ConversationItemInputAudioTranscriptionCompletedEvent)
        assert typed.logprobs is not None and typed.logprobs[0].bytes == list(b"1.50")

        # A transcription session never responds: response.create is refused, typed.
        await conn.response.create()
        refused = (await seen.until("error"))["error"]
        assert (refused["type"], refused["code"]) == (
            "invalid_request_error",
            "responses_unsupported",
        )

        # An unknown model is a typed error naming it, and the session goes on.
        await conn.session.update(
            session={"type": "transcription", "audio": {"input": {"transcription": {"model": "x"}}}}
        )
        unknown = (await seen.until("error"))["error"]
        assert (unknown["code"], unknown["param"]) == (
            "unknown_transcription_model",
            "input_transcription.model",
        )
        await conn.input_audio_buffer.append(audio=base64.b64encode(wav.frames[:9600]).decode())
        await conn.input_audio_buffer.commit()
        again = await seen.until("conversation.item.input_audio_transcription.completed")
        assert again["transcript"].startswith("0.20 seconds of audio in de")

    types = [event["type"] for event in seen.events]
    assert not [kind for kind in types if kind.startswith("response.")]
    assert types.count("error") == 2
    committed = types.index("input_audio_buffer.committed")
    assert types.index("conversation.item.input_audio_transcription.delta") > committed


async def test_transcription_null_in_a_realtime_session_stops_transcripts(
    bridge_port: int, tmp_path: Path
) -> None:
    wav = read_wav(tone_wav(tmp_path / "turn.wav", 0.5).read_bytes())
    client = AsyncOpenAI(api_key="test-key", websocket_base_url=f"ws://127.0.0.1:{bridge_port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        seen = Recorder(conn)
        await seen.until("session.created")
        # A transcription session first, so that the loopback writes turns down; then a
        # realtime one with transcription null: the turn is answered and not written down.
        await conn.session.update(session={"type": "transcription"})
        await seen.until("session.updated")
        # The SDK's param type has no null for transcription, which GA documents as "off".
        audio_in: RealtimeAudioConfigInputParam = {
            "transcription": None,  # type: ignore[typeddict-item]
            "turn_detection": None,
        }
        await conn.session.update(session={"type": "realtime", "audio": {"input": audio_in}})
        updated = (await seen.until("session.updated"))["session"]
        assert (updated["type"], updated["audio"]["input"]["transcription"]) == ("realtime", None)
        await conn.input_audio_buffer.append(audio=base64.b64encode(wav.frames).decode())
        await conn.input_audio_buffer.commit()
        await conn.response.create()
        await seen.until("response.done")
    types = [event["type"] for event in seen.events]
    assert "error" not in types
    assert not [kind for kind in types if "input_audio_transcription" in kind]
