"""Noise reduction on the embedded engine, through the real bridge and a real gRPC server, with
the official ``openai`` SDK: the same noisy WAV is sent to a session without noise reduction and
to sessions with each type, and Whisper's transcripts are scored against what was said. Every
frame is checked against OpenAI's types.

The WAV is the speech set's utterances (espeak-ng) with white noise 5 dB under the speech,
seeded; scripts/bench_denoise.py measures the same on more clips and levels
(docs/measurements/2026-12-07-noise-reduction.md).
"""

from __future__ import annotations

import asyncio
import base64
import wave
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection

from omni_grpc import audio
from omni_grpc.wire import pb
from tests.bridge.testkit import check_plain_event, running_bridge
from tests.scripts import load_script
from tests.serving import serving, settings

pytestmark = [pytest.mark.model, pytest.mark.subprocess]  # Whisper; espeak-ng speaks

speech = load_script("make_test_speech")
speech_set = load_script("speech_set")
word_error_rate = load_script("word_error_rate")

UTTERANCES = range(8)
SNR_DB = 5.0
RATE = 24_000  # OpenAI's input rate, as a stock client sends it
CHUNK = RATE // 10 * 2  # 100 ms appends


async def until(conn: AsyncRealtimeConnection, kind: str) -> list[dict[str, Any]]:
    """The events up to the first of ``kind``, each checked as a plain client's; a minute for
    each, since Whisper writes a turn in seconds on a loaded machine."""
    events: list[dict[str, Any]] = []
    while not events or events[-1]["type"] != kind:
        event = orjson.loads(await asyncio.wait_for(conn.recv_bytes(), 60))
        check_plain_event(event)
        events.append(event)
    return events


def _noisy_wav(folder: Path) -> tuple[Path, list[tuple[int, int]], list[str]]:
    """The utterances end to end as one noisy 24 kHz WAV, with where each one lies in it."""
    voice = next(v for v in speech_set.ESPEAK_VOICES if v.name == "en-us")
    clips = speech_set.clips(voice, list(UTTERANCES))
    signal = np.concatenate([clip.signal for clip in clips])
    noisy = speech_set.add_noise(signal, SNR_DB, seed=2026)
    pcm = audio.encode(audio.resample(noisy, 16_000, RATE), pb.AUDIO_ENCODING_PCM16, RATE)
    path = folder / "noisy.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(pcm)
    spans, start = [], 0
    for clip in clips:
        length = clip.signal.size * RATE // 16_000 * 2
        spans.append((start, start + length))
        start += length
    return path, spans, [clip.text for clip in clips]


async def _transcripts(port: int, pcm: bytes, spans: list[tuple[int, int]], kind: str | None):
    """Each utterance of ``pcm`` appended and committed in a session with ``kind``."""
    client = AsyncOpenAI(api_key="k", websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    heard = []
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await until(conn, "session.created")
        reduction = None if kind is None else {"type": kind}
        await conn.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["text"],
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": RATE},
                        "turn_detection": None,
                        "noise_reduction": reduction,
                    }
                },
            }
        )
        updated = (await until(conn, "session.updated"))[-1]
        assert updated["session"]["audio"]["input"]["noise_reduction"] == reduction
        for start, end in spans:
            for offset in range(start, end, CHUNK):
                chunk = pcm[offset : min(offset + CHUNK, end)]
                await conn.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
            await conn.input_audio_buffer.commit()
            events = await until(conn, "conversation.item.input_audio_transcription.completed")
            heard.append(events[-1]["transcript"])
    return heard


async def test_noise_reduction_lowers_the_word_error_rate_of_a_noisy_wav(tmp_path: Path) -> None:
    """The same WAV, with and without each type, on one embedded service; the rates are
    printed (``-s``) and each type must win back at least 10 points of word errors."""
    path, spans, said = _noisy_wav(tmp_path)
    with wave.open(str(path)) as reader:
        pcm = reader.readframes(reader.getnframes())
    options = {"responder": "echo", "turn_judge": "off", "asr_rescoring": "off"}
    rates = {}
    async with (
        serving(settings(engine="embedded", engine_options=options)) as service,
        running_bridge(service.target) as port,  # over gRPC, as a remote bridge is
    ):
        for kind in (None, "near_field", "far_field"):
            heard = await _transcripts(port, pcm, spans, kind)
            rates[kind] = word_error_rate.total(list(zip(said, heard, strict=True))).rate
    print(
        f"word error rate at {SNR_DB:g} dB SNR: "
        + ", ".join(f"{kind or 'off'} {100 * rate:.1f} %" for kind, rate in rates.items())
    )
    # Measured when this was written: off 88.3 %, near_field 51.7 %, far_field 60.0 %.
    assert rates["near_field"] < rates[None] - 0.1, rates
    assert rates["far_field"] < rates[None] - 0.1, rates
