"""The turn-taking benchmark's bridge transport without a service: each setting's
``session.update`` as the bridge reads it, GA and extension events as the driver's
observations, and the 16 to 24 kHz raise of the user's speech."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench_turns import SETTINGS
from turn_bridge import ResponseClock, Upsampler, heard, needs_extensions, session_patch

from bridge.realtime.dialect import RealtimeInbound
from omni_grpc.wire import pb


@pytest.mark.parametrize("name", SETTINGS)
def test_each_setting_reaches_the_service_as_over_grpc(name: str) -> None:
    """The bridge reads the transport's session.update as the contract config the gRPC
    transport opens with: the same turn detection and interruption rules."""
    setting = SETTINGS[name]
    frame = orjson.dumps({"type": "session.update", "session": session_patch(setting)})
    inbound = RealtimeInbound()
    config = inbound.to_request(inbound.decode(frame)).update_session.config
    # GA replaces turn detection whole, so the update turns the idle prompt off (0), where the
    # gRPC open leaves it unset: off on open.
    assert config.turn_detection.HasField("idle_timeout_ms")
    assert config.turn_detection.idle_timeout_ms == 0
    config.turn_detection.ClearField("idle_timeout_ms")
    assert config.turn_detection == setting.turn_detection
    assert config.interruption == setting.interruption
    assert config.input_audio_format == pb.AudioFormat(
        encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=24000
    )


def test_only_judged_interruptions_ask_for_the_extensions() -> None:
    """``fixed 500 ms`` is what a stock client gets, and its socket asks for GA alone."""
    assert not needs_extensions(SETTINGS["fixed 500 ms"])
    assert "interruption" not in session_patch(SETTINGS["fixed 500 ms"])
    assert all(needs_extensions(SETTINGS[name]) for name in SETTINGS if name != "fixed 500 ms")


def _delta(response_id: str, ms: int) -> dict[str, object]:
    audio = base64.b64encode(bytes(48 * ms)).decode()  # pcm16 at 24 kHz
    return {"type": "response.output_audio.delta", "response_id": response_id, "delta": audio}


def test_ga_deltas_are_placed_one_after_another_from_their_bytes() -> None:
    clock = ResponseClock()
    first, second = (heard(_delta("r1", ms), 1.0, clock) for ms in (40, 20))
    other = heard(_delta("r2", 10), 1.1, clock)
    assert (first.kind, first.response_id) == ("audio", "r1")
    assert [(e.start_ms, e.duration_ms) for e in (first, second, other)] == [
        (0.0, 40.0),
        (40.0, 20.0),
        (0.0, 10.0),
    ]


def test_the_extensions_media_clock_wins_where_sent() -> None:
    """After a resume the reply goes on from where it was held, which bytes cannot say."""
    event = {**_delta("r1", 20), "start_ms": 840.0, "duration_ms": 20.0}
    assert heard(event, 1.0, ResponseClock()).start_ms == 840.0


def test_ga_and_extension_events_become_the_drivers_observations() -> None:
    clock = ResponseClock()
    events: list[dict[str, Any]] = [
        {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 2310, "item_id": "i"},
        {"type": "response.done", "response": {"id": "r1", "status": "cancelled"}},
        {"type": "response.done", "response": {"id": "r2", "status": "completed"}},
        {"type": "overlap.decision", "action": "pause", "response_id": "r2", "audio_ms": 900.5},
        {
            "type": "turn_end.decision",
            "audio_end_ms": 2300,
            "probability": None,
            "wait_ms": 700,
            "decided_ms": 85,
            "sound_probability": 0.4,
            "words_probability": None,
        },
        {
            "type": "conversation.item.input_audio_transcription.completed",
            "item_id": "i",
            "content_index": 0,
            "transcript": "What time is it?",
        },
        {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}},
        {"type": "response.created", "response": {"id": "r3"}},
    ]
    stopped, cut, done, pause, judged, words, error, other = (heard(e, 2.0, clock) for e in events)
    assert (stopped.kind, stopped.audio_end_ms) == ("speech_stopped", 2310.0)
    assert (cut.kind, cut.response_id, cut.cancelled) == ("response_done", "r1", True)
    assert not done.cancelled
    assert (pause.kind, pause.action, pause.response_id, pause.audio_ms) == (
        "overlap",
        "pause",
        "r2",
        900.5,
    )
    assert (judged.kind, judged.probability, judged.wait_ms, judged.decided_ms) == (
        "turn_end",
        0.0,
        700.0,
        85.0,
    )
    assert (judged.audio_end_ms, judged.sound, judged.words) == (2300.0, 0.4, None)
    assert (words.kind, words.text) == ("transcript", "What time is it?")
    assert (error.kind, error.text) == ("error", "no")
    assert other.kind == "other"


def test_the_upsampler_streams_what_it_would_make_of_the_whole() -> None:
    """20 ms chunks raised one by one give the whole signal raised at once: no seam at the
    chunk boundaries, and no output held back for later input."""
    t = np.arange(16000) / 16000
    pcm = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16).tobytes()
    chunked = Upsampler()
    streamed = b"".join(chunked(pcm[i : i + 640]) for i in range(0, len(pcm), 640))
    whole = Upsampler()(pcm)
    assert streamed == whole
    assert len(whole) // 2 == 23999  # every output sample up to the newest input's position
    raised = np.frombuffer(whole, np.int16)
    assert np.abs(raised[::3] - np.frombuffer(pcm, np.int16)[::2]).max() <= 1
