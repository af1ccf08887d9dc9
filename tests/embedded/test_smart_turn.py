"""Smart Turn v3.2, the judge of a turn's end by its sound: its input as the model reads it, and
its verdicts on espeak-ng's whole requests and on requests held with a filler, as the
turn-taking set speaks them (scripts/turn_set.py)."""

from __future__ import annotations

import numpy as np
import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.engine.embedded.models import smart_turn
from omni_grpc.engine.embedded.models.smart_turn import (
    TAIL_MS,
    WINDOW_S,
    SmartTurnMissing,
    last_window,
)
from tests.scripts import load_script

from .conftest import speech

turn_set = load_script("turn_set")
RATE = 16000


def test_the_model_hears_the_last_8_s_padded_at_the_start_and_normalised() -> None:
    short = np.full(RATE, 0.5, np.float32)
    short[::2] = -0.5
    window = last_window(short)
    assert window.size == WINDOW_S * RATE
    assert float(window.mean()) == pytest.approx(0.0, abs=1e-4)
    assert float(window.std()) == pytest.approx(1.0, abs=1e-3)
    head = window[: (WINDOW_S - 1) * RATE]  # the padding: one value, the silence normalised
    assert np.ptp(head) == 0.0
    ramp = np.linspace(0.1, 1.0, 10 * RATE, dtype=np.float32)  # 10 s: the last 8 are kept
    kept = last_window(ramp)
    assert kept.size == WINDOW_S * RATE
    assert float(np.corrcoef(kept, ramp[-WINDOW_S * RATE :])[0, 1]) == pytest.approx(1.0)


def test_trailing_digital_silence_is_cut_to_the_tail_it_was_trained_with() -> None:
    speech_part = np.full(RATE, 0.3, np.float32)
    speech_part[::2] = -0.3
    padded = np.concatenate([speech_part, np.zeros(RATE, np.float32)])
    tail = TAIL_MS * RATE // 1000
    expected = np.concatenate([speech_part, np.zeros(tail, np.float32)])
    assert np.array_equal(last_window(padded), last_window(expected))
    # Silence that came through a resampler carries its dither, a step or two: cut the same.
    dither = np.random.default_rng(0).integers(-2, 3, RATE).astype(np.float32) / 32768
    dithered = np.concatenate([speech_part, dither])
    cut = np.concatenate([speech_part, dither[:tail]])
    assert np.array_equal(last_window(dithered), last_window(cut))


def test_a_missing_model_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smart_turn, "MODEL_NAME", "no-such-model.onnx")
    with pytest.raises(SmartTurnMissing, match="pip install --no-deps pipecat-ai"):
        smart_turn.model_path()


def _pcm(signal: np.ndarray) -> bytes:
    scene = speech.Scene().pause(300).add(signal).pause(200)
    return scene.pcm16()


def test_finished_requests_sound_finished_and_held_ones_do_not(engine: EmbeddedEngine) -> None:
    assert engine.runtime is not None and engine.runtime.turn_ear is not None
    ear = engine.runtime.turn_ear
    whole = {
        text: ear.probability(_pcm(speech.say(text)))
        for text in ("tell me a joke", "please open the garage door", "set a timer for ten minutes")
    }
    held = {
        (text, style): ear.probability(_pcm(turn_set.held(text, style)))
        for text, style in (
            ("remind me to call my", "um"),
            ("i need to buy some", "um"),
            ("how far is it from here to", "uh"),
        )
    }
    assert min(whole.values()) > 0.8, whole
    assert max(held.values()) < 0.2, held
    # What the feature extraction must keep: the verdict does not move with the level.
    text = "tell me a joke"
    quiet = _pcm(0.25 * speech.say(text))
    assert ear.probability(quiet) == pytest.approx(whole[text], abs=0.02)
