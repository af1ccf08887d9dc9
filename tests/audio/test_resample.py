"""Resampling with real signals: pitch survives, aliases do not, and streaming is seamless."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from omni_grpc import audio

RATES = audio.SUPPORTED_RATES_HZ


def sine(freq_hz: float, seconds: float, rate_hz: int, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(round(rate_hz * seconds)) / rate_hz
    return (amplitude * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


def peak_hz(samples: np.ndarray, rate_hz: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / rate_hz)[spectrum.argmax()])


def rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(samples.astype(np.float64) ** 2)))


@pytest.mark.parametrize(("in_rate", "out_rate"), list(itertools.product(RATES, RATES)))
def test_a_tone_keeps_its_pitch_length_and_level(in_rate: int, out_rate: int) -> None:
    tone = sine(1000.0, 1.0, in_rate)
    out = audio.resample(tone, in_rate, out_rate)
    assert out.dtype == np.float32
    assert out.size == out_rate
    assert peak_hz(out, out_rate) == pytest.approx(1000.0, abs=1.0)
    # Away from the filter's edges the level is that of the input sine (0.5 / sqrt 2).
    assert rms(out[out_rate // 10 : -out_rate // 10]) == pytest.approx(0.5 / np.sqrt(2), rel=0.01)


def test_content_above_the_new_nyquist_is_filtered_not_folded() -> None:
    high = sine(10_000.0, 1.0, 48000)  # would alias to 6 kHz at 16 kHz without filtering
    out = audio.resample(high, 48000, 16000)
    assert rms(out) < 0.01 * rms(high)


@pytest.mark.parametrize(
    ("in_rate", "out_rate"), [(16000, 24000), (44100, 16000), (8000, 16000), (24000, 8000)]
)
def test_chunked_streaming_equals_one_shot(in_rate: int, out_rate: int) -> None:
    rng = np.random.default_rng(7)
    signal = sine(440.0, 1.0, in_rate) + sine(3000.0, 1.0, in_rate, amplitude=0.2)
    stream = audio.StreamResampler(in_rate, out_rate)
    pieces, start = [], 0
    while start < signal.size:
        size = int(rng.integers(1, in_rate // 10))  # ragged chunks, up to 100 ms
        pieces.append(stream.process(signal[start : start + size]))
        start += size
    held_back = out_rate - sum(p.size for p in pieces)
    assert 0 < held_back < out_rate // 10  # the filter delay, well under 100 ms
    pieces.append(stream.flush())
    np.testing.assert_allclose(
        np.concatenate(pieces), audio.resample(signal, in_rate, out_rate), rtol=0, atol=1e-6
    )


def test_after_flush_or_reset_a_new_stream_starts_clean() -> None:
    stream = audio.StreamResampler(8000, 24000)
    first, second = sine(300.0, 0.5, 8000), sine(700.0, 0.5, 8000)
    expected = audio.resample(second, 8000, 24000)
    stream.process(first)
    stream.flush()
    again = np.concatenate([stream.process(second), stream.flush()])
    np.testing.assert_allclose(again, expected, rtol=0, atol=1e-6)
    stream.process(first)
    stream.reset()  # the held-back part of `first` is dropped, not carried into `second`
    again = np.concatenate([stream.process(second), stream.flush()])
    np.testing.assert_allclose(again, expected, rtol=0, atol=1e-6)


def test_same_rate_passes_through_and_bad_rates_are_refused() -> None:
    tone = sine(440.0, 0.1, 16000)
    stream = audio.StreamResampler(16000, 16000)
    assert np.array_equal(stream.process(tone), tone) and stream.flush().size == 0
    assert np.array_equal(audio.resample(tone, 16000, 16000), tone)
    with pytest.raises(audio.AudioFormatError, match="11025"):
        audio.StreamResampler(11025, 16000)
    with pytest.raises(audio.AudioFormatError, match="mono"):
        audio.resample(np.zeros((4, 2), dtype=np.float32), 16000, 24000)
