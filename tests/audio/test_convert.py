"""Edge conversions to and from the engines' canonical forms, one-shot and streamed."""

from __future__ import annotations

import numpy as np
import pytest

from omni_grpc import audio
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT, CANONICAL_OUTPUT

PCM16 = pb.AUDIO_ENCODING_PCM16
ENCODINGS = [
    pb.AUDIO_ENCODING_PCM16,
    pb.AUDIO_ENCODING_PCM_F32,
    pb.AUDIO_ENCODING_G711_ULAW,
    pb.AUDIO_ENCODING_G711_ALAW,
]


def sine(freq_hz: float, seconds: float, rate_hz: int) -> np.ndarray:
    t = np.arange(round(rate_hz * seconds)) / rate_hz
    return (0.5 * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


def peak_hz(data: bytes, encoding: int, rate_hz: int) -> float:
    samples = audio.decode(data, encoding, rate_hz)
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / rate_hz)[spectrum.argmax()])


def test_canonical_rates_are_those_of_the_engine_seam() -> None:
    assert (
        CANONICAL_INPUT.encoding,
        CANONICAL_INPUT.sample_rate_hz,
    ) == (PCM16, audio.CANONICAL_INPUT_RATE_HZ)
    assert (
        CANONICAL_OUTPUT.encoding,
        CANONICAL_OUTPUT.sample_rate_hz,
    ) == (PCM16, audio.CANONICAL_OUTPUT_RATE_HZ)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("rate", audio.SUPPORTED_RATES_HZ)
def test_any_client_input_becomes_canonical(encoding: int, rate: int) -> None:
    spoken = audio.encode(sine(440.0, 1.0, rate), encoding, rate)
    canonical = audio.to_canonical_input(spoken, encoding, rate)
    assert len(canonical) == 2 * 16000
    assert peak_hz(canonical, PCM16, 16000) == pytest.approx(440.0, abs=1.0)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("rate", audio.SUPPORTED_RATES_HZ)
def test_engine_output_becomes_any_client_format(encoding: int, rate: int) -> None:
    engine_audio = audio.encode(sine(880.0, 1.0, 24000), PCM16, 24000)
    out = audio.from_canonical_output(engine_audio, encoding, rate)
    assert len(out) == rate * audio.SAMPLE_WIDTH[encoding]
    assert peak_hz(out, encoding, rate) == pytest.approx(880.0, abs=1.0)


# Streams work on 16-bit samples and libsoxr dithers them (see tests/audio/test_resample.py):
# a streamed conversion has the one-shot's length exactly and its pcm16 values to within this
# many steps; a restarted filter or a lost sample is off by hundreds.
DITHER_STEPS = 1


def pcm16_steps_apart(a: bytes, b: bytes) -> int:
    x, y = np.frombuffer(a, "<i2").astype(np.int32), np.frombuffer(b, "<i2").astype(np.int32)
    assert x.size == y.size
    return int(np.abs(x - y).max(initial=0))


def test_streamed_input_is_the_one_shot_conversion_to_within_dither() -> None:
    spoken = audio.encode(sine(300.0, 1.0, 8000), pb.AUDIO_ENCODING_G711_ULAW, 8000)
    converter = audio.InputConverter()
    streamed = b"".join(
        converter.convert(c, pb.AUDIO_ENCODING_G711_ULAW, 8000)
        for c in (spoken[i : i + 160] for i in range(0, len(spoken), 160))
    )  # 20 ms
    assert len(streamed) < 32000  # the filter holds the tail until the turn ends
    streamed += converter.flush()
    expected = audio.to_canonical_input(spoken, pb.AUDIO_ENCODING_G711_ULAW, 8000)
    assert len(streamed) == len(expected) == 32000
    assert pcm16_steps_apart(streamed, expected) <= DITHER_STEPS


def test_a_rate_change_mid_stream_loses_no_audio() -> None:
    first = audio.encode(sine(300.0, 0.5, 44100), PCM16, 44100)
    second = audio.encode(sine(300.0, 0.5, 8000), PCM16, 8000)
    converter = audio.InputConverter()
    out = converter.convert(first, PCM16, 44100) + converter.convert(second, PCM16, 8000)
    out += converter.flush()
    expected = audio.to_canonical_input(first, PCM16, 44100) + audio.to_canonical_input(
        second, PCM16, 8000
    )
    assert pcm16_steps_apart(out, expected) <= DITHER_STEPS


def test_float_input_is_rounded_to_pcm16_as_the_one_shot_rounds_it() -> None:
    spoken = audio.encode(sine(440.0, 0.2, 16000), pb.AUDIO_ENCODING_PCM_F32, 16000)
    converter = audio.InputConverter()  # no resampling at 16 kHz: no dither either
    out = converter.convert(spoken, pb.AUDIO_ENCODING_PCM_F32, 16000) + converter.flush()
    assert out == audio.to_canonical_input(spoken, pb.AUDIO_ENCODING_PCM_F32, 16000)


def test_reset_drops_held_back_input() -> None:
    converter = audio.InputConverter()
    converter.convert(audio.encode(sine(300.0, 0.2, 8000), PCM16, 8000), PCM16, 8000)
    converter.reset()
    assert converter.flush() == b""
    assert audio.InputConverter().flush() == b""


def one_step_codes(expected_pcm16: bytes, encoding: int) -> list[set[int]]:
    """For each sample, the codes of the values within one step of it: what a dithered
    stream may send where the one-shot conversion's sample is ``expected_pcm16``."""
    pcm = np.frombuffer(expected_pcm16, "<i2").astype(np.int32)
    near = [np.clip(pcm + step, -32768, 32767).astype(np.int16) for step in (-1, 0, 1)]
    codes = [np.frombuffer(audio.encode_pcm16(n, encoding, 8000), np.uint8) for n in near]
    return [set(map(int, triple)) for triple in zip(*codes, strict=True)]


def test_streamed_output_is_the_one_shot_conversion_to_within_dither_and_reset_forgets() -> None:
    engine_audio = audio.encode(sine(500.0, 1.0, 24000), PCM16, 24000)
    chunks = audio.chunk_pcm16(engine_audio, 4800)  # 100 ms
    converter = audio.OutputConverter(pb.AUDIO_ENCODING_G711_ALAW, 8000)
    streamed = b"".join(converter.convert(c) for c in chunks) + converter.flush()
    expected = audio.from_canonical_output(engine_audio, PCM16, 8000)
    assert len(streamed) == len(expected) // 2 == 8000
    allowed = one_step_codes(expected, pb.AUDIO_ENCODING_G711_ALAW)
    assert all(code in near for code, near in zip(streamed, allowed, strict=True))
    converter.convert(chunks[0])
    converter.reset()
    again = b"".join(converter.convert(c) for c in chunks) + converter.flush()
    assert all(code in near for code, near in zip(again, allowed, strict=True))
    with pytest.raises(audio.AudioFormatError):
        audio.OutputConverter(pb.AUDIO_ENCODING_PCM16, 12000)
    with pytest.raises(audio.AudioFormatError):
        audio.OutputConverter(PCM16, 24000, source_rate_hz=12000)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_output_of_an_engine_s_own_rate_streams_to_any_encoding(encoding: int) -> None:
    engine_audio = audio.encode(sine(880.0, 1.0, 16000), PCM16, 16000)
    converter = audio.OutputConverter(encoding, 24000, source_rate_hz=16000)
    chunks = audio.chunk_pcm16(engine_audio, 640)  # 20 ms
    out = b"".join(converter.convert(c) for c in chunks) + converter.flush()
    assert len(out) == 24000 * audio.SAMPLE_WIDTH[encoding]
    assert peak_hz(out, encoding, 24000) == pytest.approx(880.0, abs=1.0)
    as_pcm16 = audio.encode_pcm16(audio.decode_pcm16(out, encoding, 24000), PCM16, 24000)
    expected = audio.encode(
        audio.resample(audio.decode(engine_audio, PCM16, 16000), 16000, 24000), PCM16, 24000
    )
    if encoding in (PCM16, pb.AUDIO_ENCODING_PCM_F32):  # G.711 is coarser than the dither
        assert pcm16_steps_apart(as_pcm16, expected) <= DITHER_STEPS


def test_chunks_are_bounded_whole_samples() -> None:
    data = bytes(range(200)) * 5  # 1000 bytes, 500 samples
    chunks = audio.chunk_pcm16(data, 301)  # rounds down to 300
    assert [len(c) for c in chunks] == [300, 300, 300, 100]
    assert b"".join(chunks) == data
    assert audio.chunk_pcm16(b"", 10) == []
    with pytest.raises(audio.AudioFormatError):
        audio.chunk_pcm16(b"\0\0\0", 10)
    with pytest.raises(ValueError, match="at least 2"):
        audio.chunk_pcm16(data, 1)
