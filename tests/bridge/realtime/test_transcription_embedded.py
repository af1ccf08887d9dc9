"""A transcription session through the bridge with the official ``openai`` SDK, in front of the
embedded engine: spoken turns from a WAV file, server VAD commits each, Whisper writes each
down (with the logprobs of its tokens), and nothing answers. The session names a Whisper other
than the engine's default (tiny.en; base is the default), and a turn whose transcription fails
is a typed ``...transcription.failed``, the session going on.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from openai import AsyncOpenAI
from openai.types.realtime import AudioTranscriptionParam, RealtimeAudioConfigInputParam

from omni_grpc.audio.wav import read_wav, wav_bytes
from omni_grpc.engine.embedded.models.asr import Transcriber
from tests.bridge.realtime.test_transcription_sessions import Recorder
from tests.bridge.testkit import running_bridge, service_settings, speech_pcm24
from tests.serving import serving

pytestmark = [pytest.mark.model, pytest.mark.subprocess, pytest.mark.timeout(300)]

FIRST = "please open the garage door"
SECOND = "the weather is lovely today"
FAILING_PROMPT = "fail this turn"


@pytest.fixture
async def port() -> AsyncIterator[int]:
    # The echo responder and no turn judge: no language model is loaded, only what hears.
    options = {"responder": "echo", "pace": "fast", "turn_judge": "off"}
    async with (
        serving(service_settings(engine="embedded", engine_options=options)) as running,
        running_bridge(running) as bridge_port,
    ):
        yield bridge_port


def speech_wav(path: Path) -> Path:
    """Two spoken sentences, each followed by 1.5 s of silence, as a 24 kHz WAV file."""
    silence = bytes(2 * 24000 * 3 // 2)
    pcm = speech_pcm24(FIRST) + silence + speech_pcm24(SECOND) + silence
    path.write_bytes(wav_bytes(pcm, 24000))
    return path


def words(text: str) -> set[str]:
    return {word.strip(".,!?").lower() for word in text.split()}


async def stream(conn: object, frames: bytes) -> None:
    for start in range(0, len(frames), 4800):  # 100 ms appends, as a microphone's
        chunk = base64.b64encode(frames[start : start + 4800]).decode()
        await conn.input_audio_buffer.append(audio=chunk)  # type: ignore[attr-defined]


async def test_sdk_transcription_session_with_server_vad(
    port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transcribe = Transcriber.transcribe
    told: list[tuple[str, str, str]] = []

    def watched(self: Transcriber, pcm16: bytes, *args: object, **kwargs: object) -> str:
        told.append((self.model, str(kwargs.get("language")), str(kwargs.get("prompt"))))
        if kwargs.get("prompt") == FAILING_PROMPT:
            raise RuntimeError("the decoder broke")
        return transcribe(self, pcm16, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Transcriber, "transcribe", watched)
    wav = read_wav(speech_wav(tmp_path / "speech.wav").read_bytes())
    assert (wav.rate_hz, wav.channels) == (24000, 1)
    client = AsyncOpenAI(api_key="test-key", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        seen = Recorder(conn, wait_s=60)
        created = await seen.until("session.created")
        assert created["session"]["audio"]["input"]["transcription"]["model"] == "base"
        transcription: AudioTranscriptionParam = {
            "model": "tiny.en",
            "language": "en",
            "prompt": "Garage, weather.",
        }
        await conn.session.update(
            session={
                "type": "transcription",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "transcription": transcription,
                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                    }
                },
                "include": ["item.input_audio_transcription.logprobs"],
            }
        )
        updated = (await seen.until("session.updated"))["session"]
        assert updated["type"] == "transcription"
        assert updated["audio"]["input"]["transcription"] == transcription
        assert updated["audio"]["input"]["turn_detection"]["create_response"] is False
        await stream(conn, wav.frames)
        texts = []
        for _ in range(2):
            done = await seen.until("conversation.item.input_audio_transcription.completed")
            texts.append(done["transcript"])
            tokens = "".join(each["token"] for each in done["logprobs"])
            assert tokens.strip() == done["transcript"].strip()
        assert len(words(texts[0]) & words(FIRST)) >= 3, texts
        assert len(words(texts[1]) & words(SECOND)) >= 3, texts

        # An ASR failure: the turn's typed failure, not an empty transcript.
        failing: AudioTranscriptionParam = {"model": "tiny.en", "prompt": FAILING_PROMPT}
        await conn.session.update(
            session={"type": "transcription", "audio": {"input": {"transcription": failing}}}
        )
        await seen.until("session.updated")
        await stream(conn, wav.frames[: len(wav.frames) // 4 * 2])  # whole samples
        failed = await seen.until("conversation.item.input_audio_transcription.failed")
        assert failed["error"]["code"] == "transcription_failed"
        assert failed["error"]["type"] == "server_error"
        assert "the decoder broke" in failed["error"]["message"]

    types = [event["type"] for event in seen.events]
    assert "error" not in types, [e for e in seen.events if e["type"] == "error"]
    assert not [kind for kind in types if kind.startswith("response.")]
    assert types.count("input_audio_buffer.speech_started") >= 3
    assert types.count("input_audio_buffer.committed") >= 3
    # Each turn was heard by the Whisper the session named, with its language and prompt.
    assert ("tiny.en", "en", "Garage, weather.") in told
    assert all(model == "tiny.en" for model, _, _ in told[1:]), told


async def test_transcription_null_stops_the_embedded_engines_transcripts(
    port: int, tmp_path: Path
) -> None:
    wav = read_wav(speech_wav(tmp_path / "speech.wav").read_bytes())
    client = AsyncOpenAI(api_key="test-key", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    async with client.realtime.connect(model="gpt-realtime") as conn:
        seen = Recorder(conn, wait_s=60)
        await seen.until("session.created")
        audio_in: RealtimeAudioConfigInputParam = {
            "transcription": None,  # type: ignore[typeddict-item]  # GA's "off"
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
        }
        await conn.session.update(session={"type": "realtime", "audio": {"input": audio_in}})
        updated = (await seen.until("session.updated"))["session"]
        assert updated["audio"]["input"]["transcription"] is None
        await stream(conn, wav.frames)
        # The turns come faster than they are spoken, so one response may answer both (the
        # echo responder heard them all the same).
        await seen.until("response.done")
        while [e["type"] for e in seen.events].count("input_audio_buffer.committed") < 2:
            await seen.next()
        await seen.quiet(2.0)  # whatever the engine still sends of those turns
    types = [event["type"] for event in seen.events]
    assert "error" not in types
    assert types.count("input_audio_buffer.committed") == 2
    assert not [kind for kind in types if "input_audio_transcription" in kind], types
