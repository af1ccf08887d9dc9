"""The transcriber's audio front, without a model: what it cuts from a turn before Whisper
hears it."""

from __future__ import annotations

import numpy as np
import pytest

from omni_grpc.engine.embedded.models.asr import (
    HOP_SAMPLES,
    MAX_GAIN_DB,
    level_to,
    trim_trailing_silence,
)

from .conftest import speech


def _turn(after_ms: float, noise: float = 0.0) -> np.ndarray:
    """A phrase with 300 ms of silence before its speech and ``after_ms`` after."""
    phrase = speech.say("open the garage door")
    start_ms, end_ms = speech.speech_edges_ms(phrase)
    spoken = np.concatenate(
        [
            speech.silence(300),
            phrase[int(start_ms * 16) : int(end_ms * 16)],
            speech.silence(after_ms),
        ]
    )
    rng = np.random.default_rng(7)
    return (spoken + rng.normal(0.0, noise, spoken.size)).astype(np.float32)


def test_the_silence_after_the_speech_is_cut_to_what_is_kept() -> None:
    turn = _turn(after_ms=500)
    _start_ms, end_ms = speech.speech_edges_ms(turn)
    trimmed = trim_trailing_silence(turn, keep_ms=200)
    # The last loud frame ends within a frame of the speech's edge; 200 ms follow it.
    assert 190 <= trimmed.size / 16 - end_ms <= 215, trimmed.size / 16 - end_ms
    np.testing.assert_array_equal(trimmed, turn[: trimmed.size])


def test_a_turn_with_less_silence_than_kept_is_left_whole() -> None:
    turn = _turn(after_ms=100)
    assert trim_trailing_silence(turn, keep_ms=200).size == turn.size
    assert trim_trailing_silence(turn[: HOP_SAMPLES - 1], keep_ms=0).size == HOP_SAMPLES - 1


def test_steady_noise_under_the_speech_is_not_silence() -> None:
    turn = _turn(after_ms=500, noise=0.02)  # about 22 dB under the loudest frame
    assert trim_trailing_silence(turn, keep_ms=200).size == turn.size


def _loudest_frame_dbfs(audio: np.ndarray) -> float:
    frames = audio[: audio.size // HOP_SAMPLES * HOP_SAMPLES].reshape(-1, HOP_SAMPLES)
    return float(10 * np.log10(np.max(np.mean(frames**2, axis=1))))


def test_a_quiet_turn_is_brought_to_the_level_asked_for_and_a_loud_one_down() -> None:
    turn = _turn(after_ms=200)
    for gain_db in (-25.0, -10.0, 0.0, 6.0):
        quieter = (turn * 10 ** (gain_db / 20)).astype(np.float32)
        levelled = level_to(quieter, -12.0)
        assert _loudest_frame_dbfs(levelled) == pytest.approx(-12.0, abs=0.01)
        # Only scaled: the same waveform.
        np.testing.assert_allclose(levelled * quieter.max(), quieter * levelled.max(), atol=1e-6)


def test_the_gain_is_bounded_and_silence_stays_silence() -> None:
    faint = _turn(after_ms=200) * 10 ** (-60 / 20)
    before = _loudest_frame_dbfs(faint)
    assert _loudest_frame_dbfs(level_to(faint, -12.0)) == pytest.approx(
        before + MAX_GAIN_DB, abs=0.01
    )
    silence = np.zeros(16000, np.float32)
    np.testing.assert_array_equal(level_to(silence, -12.0), silence)
    assert level_to(silence[:10], -12.0).size == 10
