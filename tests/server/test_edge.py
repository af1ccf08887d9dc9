"""The audio edge: a large append is converted in slices with the same result as whole, the
size the core charges to the memory budget is the size the engine gets, an append the core
found native passes untouched, and a response's output goes through one resampler stream whose
tail comes before the response's end."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from omni_grpc import audio as audio_
from omni_grpc.core.commands import AppendAudio, CommitAudio
from omni_grpc.server.edge import CONVERT_SLICE_BYTES, AudioEdge
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import (
    CANONICAL_OUTPUT_RATE_HZ,
    PCM16_WIDTH,
    SAMPLE_WIDTH,
    SUPPORTED_RATES_HZ,
    canonical_input_bytes,
)
from tests.server.streams import open_stream, pcm16, read_until

PCM16, ULAW = pb.AUDIO_ENCODING_PCM16, pb.AUDIO_ENCODING_G711_ULAW


def _append(audio: bytes, encoding: int, rate_hz: int) -> pb.ConverseRequest:
    return pb.ConverseRequest(
        client_seq=1,
        append_input_audio=pb.AppendInputAudio(
            audio=audio, encoding=encoding, sample_rate_hz=rate_hz
        ),
    )


def _admitted(audio: bytes, encoding: int, rate_hz: int, *, native: bool = False) -> AppendAudio:
    """An append as the core hands it on: its audio, its format, and whether it is native."""
    return AppendAudio(audio, encoding, rate_hz, native, client_seq=1)


def _engine_input(edge: AudioEdge, admitted: AppendAudio) -> AppendAudio:
    converted = edge.engine_input(admitted)
    assert converted is not None
    assert converted.native and converted.client_seq == admitted.client_seq
    return converted


def _noise(size: int) -> bytes:
    return np.random.default_rng(7).integers(0, 256, size, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("encoding", [PCM16, ULAW])
def test_a_large_append_converted_in_slices_equals_the_whole(encoding: int) -> None:
    rate = CANONICAL_OUTPUT_RATE_HZ if encoding == PCM16 else min(SUPPORTED_RATES_HZ)
    audio = _noise(3 * CONVERT_SLICE_BYTES + 10 * SAMPLE_WIDTH[encoding])
    sliced = AudioEdge(pb.SessionConfig())
    whole = AudioEdge(pb.SessionConfig())
    got = _engine_input(sliced, _admitted(audio, encoding, rate)).audio
    # The whole append through the converter in one call, as before slicing: the same length,
    # and both the one-shot conversion of the whole but for the resampler's 16-bit dither
    # (tests/audio/test_resample.py), so they may differ by a step each way.
    expected = whole._input.convert(audio, encoding, rate)
    assert len(got) == len(expected)
    one_shot = audio_.to_canonical_input(audio, encoding, rate)[: len(got)]
    assert _steps_apart(got, one_shot) <= DITHER_STEPS
    assert _steps_apart(expected, one_shot) <= DITHER_STEPS


@pytest.mark.parametrize("encoding", [PCM16, ULAW])
def test_the_charged_size_is_what_the_engine_gets_by_the_commit(encoding: int) -> None:
    rate = CANONICAL_OUTPUT_RATE_HZ if encoding == PCM16 else min(SUPPORTED_RATES_HZ)
    edge = AudioEdge(pb.SessionConfig())
    audio = _noise(2 * CONVERT_SLICE_BYTES)
    charged = canonical_input_bytes(len(audio), encoding, rate)  # what the core holds
    converted = _engine_input(edge, _admitted(audio, encoding, rate)).audio
    tail = edge.input_tail(CommitAudio(client_seq=2))
    produced = len(converted) + (len(tail.audio) if tail else 0)
    assert abs(charged - produced) <= PCM16_WIDTH


def test_an_append_the_core_found_native_passes_untouched() -> None:
    edge = AudioEdge(pb.SessionConfig())
    audio = _noise(960)
    append = _engine_input(edge, _admitted(audio, PCM16, 24000, native=True))
    assert (append.audio, append.encoding, append.rate_hz) == (audio, PCM16, 24000)
    assert edge.input_tail(CommitAudio(client_seq=2)) is None  # nothing held back
    # Any other form is made canonical: 48 kHz pcm16, G.711.
    for encoding, rate in ((PCM16, 48000), (ULAW, 8000)):
        converted = _engine_input(edge, _admitted(audio, encoding, rate))
        assert (converted.encoding, converted.rate_hz) == (PCM16, 16000)


def test_output_in_the_session_s_format_passes_untouched() -> None:
    edge = AudioEdge(_output_config(PCM16, CANONICAL_OUTPUT_RATE_HZ))
    same = _delta(_noise(960), start_ms=40.0)
    assert edge.session_output(same)
    assert (same.audio, same.start_ms, same.duration_ms) == (_noise(960), 40.0, 20.0)
    assert edge.output_tail("response_done", _done("resp_1")) is None  # no stream, no tail


def test_a_response_s_output_goes_through_one_stream_and_its_tail_comes_at_its_end() -> None:
    edge = AudioEdge(_output_config(PCM16, 16000))
    engine_audio = _tone(1.0, CANONICAL_OUTPUT_RATE_HZ)
    sent = []
    for index, chunk in enumerate(_chunks(engine_audio, CANONICAL_OUTPUT_RATE_HZ)):
        delta = _delta(chunk, start_ms=100.0 + 20.0 * index)
        if edge.session_output(delta):
            sent.append(delta)
    tail = edge.output_tail("response_done", _done("resp_1"))
    assert tail is not None
    sent.append(tail.output_audio_delta)
    out = b"".join(delta.audio for delta in sent)
    # The whole response at once, to within the dither; the rate ratio's length exactly.
    expected = _one_shot(engine_audio, CANONICAL_OUTPUT_RATE_HZ, 16000)
    assert len(out) == len(expected) == 32000
    assert _steps_apart(out, expected) <= DITHER_STEPS
    # Each delta says where its own audio lies on the response's clock, from its first start.
    assert sent[0].start_ms == 100.0
    for before, after in itertools.pairwise(sent):
        assert after.start_ms == pytest.approx(before.start_ms + before.duration_ms)
    for delta in sent:
        assert delta.duration_ms == pytest.approx(len(delta.audio) / 2 / 16)
        assert (delta.encoding, delta.sample_rate_hz) == (PCM16, 16000)
        assert (delta.response_id, delta.item_id) == ("resp_1", "item_1")
    assert edge.output_tail("response_done", _done("resp_1")) is None  # the stream is gone


def test_a_chunk_the_filter_holds_whole_is_not_sent_and_the_next_carries_it() -> None:
    edge = AudioEdge(_output_config(PCM16, CANONICAL_OUTPUT_RATE_HZ))
    first = _delta(_tone(0.02, 16000), rate=16000)  # 20 ms: less than the filter's delay
    assert not edge.session_output(first)
    assert first.audio == b"" and first.duration_ms == 0.0
    second = _delta(_tone(0.02, 16000), rate=16000, start_ms=20.0)
    assert edge.session_output(second)
    assert second.start_ms == 0.0 and len(second.audio) > 0


@pytest.mark.parametrize("ending", ["cancelled", "cleared"])
def test_a_stopped_response_leaves_its_tail_unsaid_and_the_next_starts_clean(
    ending: str,
) -> None:
    edge = AudioEdge(_output_config(ULAW, 8000))
    for chunk in _chunks(_tone(0.5, CANONICAL_OUTPUT_RATE_HZ), CANONICAL_OUTPUT_RATE_HZ):
        edge.session_output(_delta(chunk))
    if ending == "cancelled":
        stop = _done("resp_1", pb.RESPONSE_STATUS_CANCELLED)
        assert edge.output_tail("response_done", stop) is None
    else:
        cleared = pb.ConverseResponse(
            output_audio_cleared=pb.OutputAudioCleared(response_id="resp_1")
        )
        assert edge.output_tail("output_audio_cleared", cleared) is None
    # The next response: a fresh stream, as on a fresh edge (no audio of the first in it).
    second = _tone(0.5, CANONICAL_OUTPUT_RATE_HZ)
    fresh = AudioEdge(_output_config(ULAW, 8000))
    got, clean = [], []
    for edge_, sizes in ((edge, got), (fresh, clean)):
        for chunk in _chunks(second, CANONICAL_OUTPUT_RATE_HZ):
            delta = _delta(chunk, response_id="resp_2")
            edge_.session_output(delta)
            sizes.append((len(delta.audio), delta.start_ms))
        tail = edge_.output_tail("response_done", _done("resp_2"))
        assert tail is not None
        sizes.append((len(tail.output_audio_delta.audio), tail.output_audio_delta.start_ms))
    assert got == clean
    assert sum(size for size, _ in got) == 4000  # 0.5 s of G.711 at 8 kHz


def test_another_response_s_end_leaves_the_stream_alone() -> None:
    edge = AudioEdge(_output_config(PCM16, 16000))
    for chunk in _chunks(_tone(0.2, CANONICAL_OUTPUT_RATE_HZ), CANONICAL_OUTPUT_RATE_HZ):
        edge.session_output(_delta(chunk))
    assert edge.output_tail("response_done", _done("resp_0")) is None
    tail = edge.output_tail("response_done", _done("resp_1"))
    assert tail is not None and tail.output_audio_delta.audio


def test_responses_at_once_each_go_through_their_own_stream() -> None:
    # An out-of-band response beside the running one: their chunks interleave, and each
    # comes out as it would alone, on its own clock.
    edge = AudioEdge(_output_config(PCM16, 16000))
    spoken, side = _tone(0.4, CANONICAL_OUTPUT_RATE_HZ), _tone(0.2, CANONICAL_OUTPUT_RATE_HZ)
    out: dict[str, list[pb.OutputAudioDelta]] = {"resp_1": [], "side": []}
    pairs = itertools.zip_longest(
        _chunks(spoken, CANONICAL_OUTPUT_RATE_HZ), _chunks(side, CANONICAL_OUTPUT_RATE_HZ)
    )
    for index, (one, other) in enumerate(pairs):
        for response_id, chunk in (("resp_1", one), ("side", other)):
            if chunk is not None:
                delta = _delta(chunk, start_ms=20.0 * index, response_id=response_id)
                if edge.session_output(delta):
                    out[response_id].append(delta)
    for response_id, pcm in (("side", side), ("resp_1", spoken)):
        tail = edge.output_tail("response_done", _done(response_id))
        assert tail is not None
        out[response_id].append(tail.output_audio_delta)
        got = b"".join(delta.audio for delta in out[response_id])
        expected = _one_shot(pcm, CANONICAL_OUTPUT_RATE_HZ, 16000)
        assert len(got) == len(expected)
        assert _steps_apart(got, expected) <= DITHER_STEPS
        assert out[response_id][0].start_ms == 0.0
        for before, after in itertools.pairwise(out[response_id]):
            assert after.start_ms == pytest.approx(before.start_ms + before.duration_ms)
    assert edge.output_tail("response_done", _done("resp_1")) is None  # both streams gone


def test_a_new_response_or_format_starts_a_new_stream() -> None:
    config = _output_config(PCM16, 16000)
    edge = AudioEdge(config)
    chunk = _tone(0.1, CANONICAL_OUTPUT_RATE_HZ)
    first = _delta(chunk)
    edge.session_output(first)
    # A response that never said it ended: the next one's stream starts on its own clock.
    other = _delta(chunk, response_id="resp_2", start_ms=500.0)
    edge.session_output(other)
    assert other.start_ms == 500.0 and len(other.audio) == len(first.audio)
    # An update to the output format mid-response: a stream in the new format.
    edge.config = _output_config(ULAW, 8000)
    third = _delta(chunk, response_id="resp_2", start_ms=600.0)
    edge.session_output(third)
    assert (third.encoding, third.sample_rate_hz, third.start_ms) == (ULAW, 8000, 600.0)


def test_an_engine_that_changes_its_rate_mid_response_loses_no_audio() -> None:
    edge = AudioEdge(_output_config(PCM16, 16000))
    first = _delta(_tone(0.5, CANONICAL_OUTPUT_RATE_HZ))
    second = _delta(_tone(0.5, 22050), rate=22050, start_ms=500.0)
    out = b""
    for delta in (first, second):
        edge.session_output(delta)
        out += delta.audio
    tail = edge.output_tail("response_done", _done("resp_1"))
    assert tail is not None
    out += tail.output_audio_delta.audio
    assert len(out) == 2 * 16000  # both halves whole, the first's tail ahead of the second
    assert second.start_ms == pytest.approx(first.duration_ms)


async def test_a_served_response_in_g711_comes_whole_with_its_tail_before_its_end(stub) -> None:
    config = pb.SessionConfig(
        output_audio_format=pb.AudioFormat(encoding=ULAW, sample_rate_hz=8000),
        turn_detection=pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_NONE),
    )
    call, _ = await open_stream(stub, config)
    speech = pb.AppendInputAudio(audio=pcm16(200), sample_rate_hz=CANONICAL_OUTPUT_RATE_HZ)
    await call.write(pb.ConverseRequest(client_seq=1, append_input_audio=speech))
    await call.write(pb.ConverseRequest(client_seq=2, commit_input_audio=pb.CommitInputAudio()))
    events = await read_until(call, "response_done")
    call.cancel()
    deltas = [e.output_audio_delta for e in events if e.HasField("output_audio_delta")]
    assert deltas and events[-1].response_done.response.status == pb.RESPONSE_STATUS_COMPLETED
    assert all((d.encoding, d.sample_rate_hz) == (ULAW, 8000) and d.audio for d in deltas)
    # The loopback says the 200 ms back: 1600 bytes of G.711 at 8 kHz (the same 1 % as the
    # 24 kHz round trip of test_service); without the tail it would be some 20 ms short.
    assert abs(sum(len(d.audio) for d in deltas) - 1600) <= 16
    for before, after in itertools.pairwise(deltas):
        assert after.start_ms == pytest.approx(before.start_ms + before.duration_ms)
    assert all(d.duration_ms == pytest.approx(len(d.audio) / 8) for d in deltas)


# Streams work on 16-bit samples that libsoxr dithers: a converted stream is the one-shot
# conversion to within one step (tests/audio/test_resample.py says why); a lost sample or a
# seam click is off by hundreds.
DITHER_STEPS = 1


def _steps_apart(a: bytes, b: bytes) -> int:
    x, y = np.frombuffer(a, "<i2").astype(np.int32), np.frombuffer(b, "<i2").astype(np.int32)
    assert x.size == y.size
    return int(np.abs(x - y).max(initial=0))


def _tone(seconds: float, rate_hz: int) -> bytes:
    t = np.arange(round(rate_hz * seconds)) / rate_hz
    return audio_.encode(0.5 * np.sin(2 * np.pi * 440.0 * t), PCM16, rate_hz)


def _chunks(pcm: bytes, rate_hz: int, ms: int = 20) -> list[bytes]:
    return audio_.chunk_pcm16(pcm, rate_hz * ms // 1000 * 2)


def _one_shot(pcm: bytes, in_rate: int, out_rate: int) -> bytes:
    samples = audio_.resample(audio_.decode(pcm, PCM16, in_rate), in_rate, out_rate)
    return audio_.encode(samples, PCM16, out_rate)


def _output_config(encoding: int, rate_hz: int) -> pb.SessionConfig:
    return pb.SessionConfig(
        output_audio_format=pb.AudioFormat(encoding=encoding, sample_rate_hz=rate_hz)
    )


def _delta(
    pcm: bytes,
    *,
    rate: int = CANONICAL_OUTPUT_RATE_HZ,
    start_ms: float = 0.0,
    response_id: str = "resp_1",
) -> pb.OutputAudioDelta:
    return pb.OutputAudioDelta(
        audio=pcm,
        encoding=PCM16,
        sample_rate_hz=rate,
        start_ms=start_ms,
        duration_ms=len(pcm) / 2 * 1000 / rate,
        response_id=response_id,
        item_id="item_1",
    )


def _done(
    response_id: str, status: pb.ResponseStatus.ValueType = pb.RESPONSE_STATUS_COMPLETED
) -> pb.ConverseResponse:
    response = pb.Response(id=response_id, status=status)
    return pb.ConverseResponse(response_done=pb.ResponseDone(response=response))
