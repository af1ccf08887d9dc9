"""The audio edge: a large append is converted in slices with the same result as whole, and
the size it is charged to the memory budget is the size the engine gets."""

from __future__ import annotations

import numpy as np
import pytest

from omni_grpc.server.edge import CONVERT_SLICE_BYTES, AudioEdge
from omni_grpc.wire import pb
from omni_grpc.wire.audio import (
    CANONICAL_OUTPUT_RATE_HZ,
    PCM16_WIDTH,
    SAMPLE_WIDTH,
    SUPPORTED_RATES_HZ,
)

PCM16, ULAW = pb.AUDIO_ENCODING_PCM16, pb.AUDIO_ENCODING_G711_ULAW


def _append(audio: bytes, encoding: int, rate_hz: int) -> pb.ConverseRequest:
    return pb.ConverseRequest(
        client_seq=1,
        append_input_audio=pb.AppendInputAudio(
            audio=audio, encoding=encoding, sample_rate_hz=rate_hz
        ),
    )


def _noise(size: int) -> bytes:
    return np.random.default_rng(7).integers(0, 256, size, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("encoding", [PCM16, ULAW])
def test_a_large_append_converted_in_slices_equals_the_whole(encoding: int) -> None:
    rate = CANONICAL_OUTPUT_RATE_HZ if encoding == PCM16 else min(SUPPORTED_RATES_HZ)
    audio = _noise(3 * CONVERT_SLICE_BYTES + 10 * SAMPLE_WIDTH[encoding])
    sliced = AudioEdge(pb.SessionConfig())
    whole = AudioEdge(pb.SessionConfig())
    got = sliced.canonical_input(_append(audio, encoding, rate)).append_input_audio.audio
    # The whole append through the converter in one call, as before slicing.
    expected = whole._input.convert(audio, encoding, rate)
    assert got == expected


@pytest.mark.parametrize("encoding", [PCM16, ULAW])
def test_the_charged_size_is_what_the_engine_gets_by_the_commit(encoding: int) -> None:
    rate = CANONICAL_OUTPUT_RATE_HZ if encoding == PCM16 else min(SUPPORTED_RATES_HZ)
    edge = AudioEdge(pb.SessionConfig())
    request = _append(_noise(2 * CONVERT_SLICE_BYTES), encoding, rate)
    charged = edge.canonical_size(request)
    converted = edge.canonical_input(request).append_input_audio.audio
    tail = edge.input_tail(pb.ConverseRequest(client_seq=2))
    produced = len(converted) + (len(tail.append_input_audio.audio) if tail else 0)
    assert abs(charged - produced) <= PCM16_WIDTH


def test_an_append_in_a_form_native_to_the_engine_passes_untouched() -> None:
    edge = AudioEdge(pb.SessionConfig(), native_rates_hz=(16000, 24000))
    audio = _noise(960)
    request = _append(audio, PCM16, 24000)
    assert edge.canonical_size(request) == len(audio)
    append = edge.canonical_input(request).append_input_audio
    assert (append.audio, append.encoding, append.sample_rate_hz) == (audio, PCM16, 24000)
    assert edge.input_tail(pb.ConverseRequest(client_seq=2)) is None  # nothing held back
    # Any other form is still made canonical: 48 kHz is not native here, nor is G.711.
    for encoding, rate in ((PCM16, 48000), (ULAW, 8000)):
        converted = edge.canonical_input(_append(audio, encoding, rate)).append_input_audio
        assert (converted.encoding, converted.sample_rate_hz) == (PCM16, 16000)


def test_output_in_an_engine_s_own_form_is_converted_to_the_session_s() -> None:
    config = pb.SessionConfig(
        output_audio_format=pb.AudioFormat(encoding=PCM16, sample_rate_hz=CANONICAL_OUTPUT_RATE_HZ)
    )
    edge = AudioEdge(config)
    same = pb.OutputAudioDelta(audio=_noise(960), encoding=PCM16, sample_rate_hz=24000)
    kept = same.audio
    edge.session_output(same)
    assert same.audio == kept  # already the session's format: not touched
    other = pb.OutputAudioDelta(audio=_noise(640), encoding=PCM16, sample_rate_hz=16000)
    edge.session_output(other)
    assert (other.encoding, other.sample_rate_hz) == (PCM16, 24000)
    assert len(other.audio) == 960  # 20 ms at 24 kHz
