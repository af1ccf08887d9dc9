"""Resampling with real signals: pitch survives, aliases do not, and streaming is seamless."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import soxr

from omni_grpc import audio
from omni_grpc.audio.formats import float_to_pcm16, pcm16_to_float
from omni_grpc.audio.resample import QUALITY

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


# Streams work on 16-bit samples, and libsoxr adds triangular dither when it brings its float
# result down to 16 bits: a sample may land one step either side of the rounded float value,
# and two runs over the same chunks may differ by that much (the noise is not reproducible
# from run to run, so not even soxr's own int16 stream can be matched exactly). The tests of
# streams therefore hold lengths exactly and values to within DITHER_STEPS of the one-shot
# float result (which a float stream matches exactly): a restarted filter, a lost or doubled
# sample or a seam click is off by hundreds of steps, not one.
DITHER_STEPS = 1


def pcm16(samples: np.ndarray) -> np.ndarray:
    return float_to_pcm16(samples.astype(np.float32))


def one_shot_pcm16(signal: np.ndarray, in_rate: int, out_rate: int) -> np.ndarray:
    """The whole signal resampled at once through floats, rounded to 16 bits."""
    return pcm16(audio.resample(pcm16_to_float(signal), in_rate, out_rate))


def steps_apart(a: np.ndarray, b: np.ndarray) -> int:
    assert a.size == b.size
    return int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max(initial=0))


def ragged_chunks(signal: np.ndarray, rate: int, seed: int = 7) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    chunks, start = [], 0
    while start < signal.size:
        size = int(rng.integers(1, rate // 10))  # up to 100 ms
        chunks.append(signal[start : start + size])
        start += size
    return chunks


PAIRS = [(16000, 24000), (24000, 16000), (44100, 16000), (8000, 16000), (24000, 8000)]


@pytest.mark.parametrize(("in_rate", "out_rate"), PAIRS)
def test_a_stream_is_soxrs_own_int16_stream_and_the_one_shot_to_within_dither(
    in_rate: int, out_rate: int
) -> None:
    signal = pcm16(sine(440.0, 1.0, in_rate) + sine(3000.0, 1.0, in_rate, amplitude=0.2))
    chunks = ragged_chunks(signal, in_rate)
    ours = audio.StreamResampler(in_rate, out_rate)
    theirs = soxr.ResampleStream(in_rate, out_rate, 1, dtype="int16", quality=QUALITY)
    got = [ours.process(chunk) for chunk in chunks]
    own = [theirs.resample_chunk(chunk) for chunk in chunks]
    # Chunk for chunk, what libsoxr's own stream gives: the same sizes, the same values but
    # for the dither (held to within one step of the one-shot result below, both of them).
    assert [piece.size for piece in got] == [piece.size for piece in own]
    assert all(piece.dtype == np.int16 for piece in got)
    held_back = out_rate - sum(piece.size for piece in got)
    assert 0 < held_back < out_rate // 10  # the filter delay, well under 100 ms
    got.append(ours.flush())
    own.append(theirs.resample_chunk(np.zeros(0, dtype=np.int16), last=True))
    assert got[-1].size == own[-1].size == held_back
    # The whole: the rate ratio's length exactly, and the one-shot's values.
    expected = one_shot_pcm16(signal, in_rate, out_rate)
    assert expected.size == out_rate
    assert steps_apart(np.concatenate(got), expected) <= DITHER_STEPS
    assert steps_apart(np.concatenate(own), expected) <= DITHER_STEPS


def test_silence_comes_out_as_silence_to_within_the_dither() -> None:
    stream = audio.StreamResampler(24000, 16000)
    chunks = [stream.process(np.zeros(480, dtype=np.int16)) for _ in range(50)]
    quiet = np.concatenate([*chunks, stream.flush()])
    assert quiet.size == 16000
    assert steps_apart(quiet, np.zeros_like(quiet)) <= DITHER_STEPS


@pytest.mark.parametrize(("in_rate", "out_rate"), [(24000, 16000), (16000, 24000)])
def test_a_sine_in_20_ms_chunks_has_no_seam(in_rate: int, out_rate: int) -> None:
    signal = pcm16(sine(1000.0, 1.0, in_rate))
    chunk = in_rate // 50
    stream = audio.StreamResampler(in_rate, out_rate)
    pieces = [stream.process(signal[i : i + chunk]) for i in range(0, signal.size, chunk)]
    streamed = np.concatenate([*pieces, stream.flush()])
    expected = one_shot_pcm16(signal, in_rate, out_rate)
    # Every sample, seams included, within the dither of the whole signal resampled at once.
    assert steps_apart(streamed, expected) <= DITHER_STEPS
    # The test sees a seam where there is one: resampling each chunk on its own, as the
    # edge once did with output, restarts the filter at every seam.
    apart = [
        one_shot_pcm16(signal[i : i + chunk], in_rate, out_rate)
        for i in range(0, signal.size, chunk)
    ]
    assert steps_apart(np.concatenate(apart), expected) > 100 * DITHER_STEPS


def test_after_flush_or_reset_a_new_stream_starts_clean() -> None:
    first, second = pcm16(sine(300.0, 0.5, 8000)), pcm16(sine(700.0, 0.5, 8000))
    expected = one_shot_pcm16(second, 8000, 24000)
    fresh = audio.StreamResampler(8000, 24000)
    sizes = [fresh.process(second).size, fresh.flush().size]
    stream = audio.StreamResampler(8000, 24000)
    stream.process(first)
    stream.flush()
    again = [stream.process(second), stream.flush()]
    assert [piece.size for piece in again] == sizes
    assert steps_apart(np.concatenate(again), expected) <= DITHER_STEPS
    stream.process(first)
    stream.reset()  # the held-back part of `first` is dropped, not carried into `second`
    again = [stream.process(second), stream.flush()]
    assert [piece.size for piece in again] == sizes
    assert steps_apart(np.concatenate(again), expected) <= DITHER_STEPS


def test_same_rate_passes_through_and_bad_rates_are_refused() -> None:
    tone = sine(440.0, 0.1, 16000)
    stream = audio.StreamResampler(16000, 16000)
    assert np.array_equal(stream.process(pcm16(tone)), pcm16(tone)) and stream.flush().size == 0
    assert np.array_equal(audio.resample(tone, 16000, 16000), tone)
    with pytest.raises(audio.AudioFormatError, match="11025"):
        audio.StreamResampler(11025, 16000)
    with pytest.raises(audio.AudioFormatError, match="mono"):
        audio.resample(np.zeros((4, 2), dtype=np.float32), 16000, 24000)
    with pytest.raises(audio.AudioFormatError, match="mono"):
        audio.StreamResampler(16000, 24000).process(np.zeros((4, 2), dtype=np.int16))
