"""The vllm-omni engine against vLLM-Omni's real duplex session layer (see :mod:`.harness`).

Runs in ``.venv-vllm-omni`` only (marked ``vllm_omni``). The engine talks to a real
``DuplexOmni`` whose sessions are held by vLLM-Omni's own manager, runners and MiniCPM-o
plugin; the model behind them is the harness's fake stage, which a test makes speak.
"""

from __future__ import annotations

import base64
import collections
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from omni_grpc import audio
from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import Limits
from omni_grpc.engine.base import EngineError
from omni_grpc.engine.vllm_omni import VllmOmniEngine
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ
from tests.engine.conformance import Probe, audio_ms, check_lifecycles, kinds, voice_like

from ..support import WARNING_FILTERS

# vLLM-Omni still imports the standard library's audioop, which warns on Python 3.11+.
OMNI_WARNING_FILTERS = (*WARNING_FILTERS, "ignore:'audioop' is deprecated:DeprecationWarning")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.vllm_omni,
    *(pytest.mark.filterwarnings(f) for f in OMNI_WARNING_FILTERS),
]


def ref_audio_uri() -> str:
    """A voice sample for MiniCPM-o's speech, as a data: URI of a 16 kHz WAV."""
    import io
    import wave

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(CANONICAL_INPUT_RATE_HZ)
        wav.writeframes(voice_like(1.0, f0_hz=200))
    return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.fixture
async def layer() -> AsyncIterator[Any]:
    from .harness import start_session_layer

    started = start_session_layer()
    yield started
    await started.shutdown()


def make_engine(layer: Any, **options: str) -> VllmOmniEngine:
    base = {
        "model": "openbmb/MiniCPM-o-4_5",
        "ref_audio": ref_audio_uri(),
        "auto_response": "false",
    }
    return VllmOmniEngine(base | options, omni=layer.omni)


async def open_probe(engine: VllmOmniEngine, name: str = "s1") -> Probe:
    config = resolve_config(pb.SessionConfig(), Limits(), engine.features)
    return Probe(await engine.open_session(name, config), 5.0)


def duplex_id(probe: Probe) -> str:
    return str(probe.session.handle.session_id)  # type: ignore[attr-defined]


async def speak_turn(probe: Probe, seconds: float = 1.0) -> list[pb.ConverseResponse]:
    """Appends speech and commits it; returns the events up to the response's creation."""
    await probe.append(voice_like(seconds), chunk_ms=100)
    await probe.send(commit_input_audio=pb.CommitInputAudio())
    return await probe.until("response_created")


async def test_a_turn_reaches_the_model_and_its_speech_comes_back(layer: Any) -> None:
    engine = make_engine(layer)
    probe = await open_probe(engine)
    try:
        heard = voice_like(1.0)
        before = await speak_turn(probe)
        order = kinds(before)
        committed = before[order.index("input_committed")].input_committed
        assert committed.audio_duration_ms == pytest.approx(1000.0)
        user_items = [e.item_done.item for e in before if e.HasField("item_done")]
        assert [item.id for item in user_items] == [committed.item_id]
        assert order.index("input_committed") < order.index("response_created")

        # The unit vLLM-Omni gave the model is our audio, as 16 kHz float samples.
        (unit,) = [s for s in layer.model.submissions if s.context.stage_id == 0]
        payload = unit.prompt["model_intermediate_buffer"]["duplex"]["payload"]
        samples = np.frombuffer(base64.b64decode(payload["audio"]), dtype="<f4")
        expected = audio.decode(heard, pb.AUDIO_ENCODING_PCM16, CANONICAL_INPUT_RATE_HZ)
        np.testing.assert_allclose(samples, expected[: len(samples)], atol=1e-4)

        assert layer.speak(duplex_id(probe), "hello ", 1.0)
        assert layer.speak(duplex_id(probe), "world.", 0.5, turn_end=True)
        rest = await probe.until("response_done")
    finally:
        await probe.close()
        await engine.stop()
    (answer,) = check_lifecycles(before + rest).values()
    created = answer[0].response_created
    done = answer[-1].response_done.response
    assert (done.status, done.status_reason) == (pb.RESPONSE_STATUS_COMPLETED, "stop")
    assert "response_speak" in kinds(answer)
    assert audio_ms(answer) == pytest.approx(1500.0)
    assert done.usage.output_audio_ms == pytest.approx(1500.0)
    assert done.usage.input_audio_ms == pytest.approx(1000.0)
    (item,) = done.output
    assert (item.id, item.role) == (created.item_id, pb.ITEM_ROLE_ASSISTANT)
    assert item.content[0].transcript == "hello world."
    words = "".join(
        e.output_audio_transcript_delta.delta
        for e in answer
        if e.HasField("output_audio_transcript_delta")
    )
    assert words == "hello world."
    assert 0 < done.latency.first_audio_ms <= done.latency.total_ms


async def test_a_barge_in_cancels_the_answer_and_aborts_the_model_request(layer: Any) -> None:
    engine = make_engine(layer)
    probe = await open_probe(engine)
    try:
        await speak_turn(probe)
        layer.speak(duplex_id(probe), "a long answer ", 1.0)
        await probe.until("output_audio_delta")
        stage_request = layer.model.submissions[-1].context.request_id
        started = time.monotonic()
        await probe.send(barge_in=pb.BargeIn())
        events = await probe.until("response_done")
        took_s = time.monotonic() - started
        done = events[-1].response_done.response
        assert (done.status, done.status_reason) == (pb.RESPONSE_STATUS_CANCELLED, "barge_in")
        assert took_s < 0.5
        assert [stage_request] in layer.model.aborts
        assert done.usage.output_audio_ms == pytest.approx(1000.0)
        # What the model says for the cancelled turn is dropped by vLLM-Omni.
        assert layer.speak(duplex_id(probe), "more words", 1.0)
        late = await probe.quiet(0.3)
        assert not [e for e in late if e.WhichOneof("event") != "input_cleared"], kinds(late)
        check_lifecycles(probe.seen)
    finally:
        await probe.close()
        await engine.stop()


def endings(events: list[pb.ConverseResponse]) -> collections.Counter[str]:
    """How many times each response was ended: by its ``response_done``, or by a
    ``response_listen`` that names it (the contract's listen names the response it ends)."""
    ended: collections.Counter[str] = collections.Counter()
    for event in events:
        if event.HasField("response_done"):
            ended[event.response_done.response.id] += 1
        elif event.HasField("response_listen") and event.response_listen.response_id:
            ended[event.response_listen.response_id] += 1
    return ended


@pytest.fixture
def one_silence_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM-Omni feeds a model that listened inside a response silence units, 64 of them in
    an auto-response session, before it ends the response itself; one is enough here."""
    from vllm_omni.engine.duplex.session.model_channel import ModelChannel

    monkeypatch.setattr(ModelChannel, "_AUTO_RESPONSE_MAX_CONTINUATION_UNITS", 1)


@pytest.mark.usefixtures("one_silence_unit")
async def test_a_listen_that_ends_a_response_ends_it_once(layer: Any) -> None:
    """vLLM-Omni ends a response the model listened out of with ``response.listen`` naming
    it, then that response's ``response.done``: ours ends it once, with the done."""
    engine = make_engine(layer, auto_response="true")
    probe = await open_probe(engine)
    try:
        await probe.append(voice_like(1.0), chunk_ms=100)
        await layer.until_submitted(1)  # the model heard it
        layer.speak(duplex_id(probe), "one ", 0.5)
        await probe.until("output_audio_delta")
        # The model listens: vLLM-Omni gives it a silence unit, and it speaks again.
        units = len(layer.model.submissions)
        assert layer.listen(duplex_id(probe))
        await layer.until_submitted(units + 1)
        layer.speak(duplex_id(probe), "two.", 0.5)
        await probe.until("output_audio_delta")
        # It listens again; the response's silence is spent, and vLLM-Omni ends it.
        assert layer.listen(duplex_id(probe))
        await probe.until("response_done")
    finally:
        await probe.close()
        await engine.stop()
    (answer,) = check_lifecycles(probe.seen).values()
    done = answer[-1].response_done.response
    assert (done.status, done.output[0].content[0].transcript) == (
        pb.RESPONSE_STATUS_COMPLETED,
        "one two.",
    )
    assert audio_ms(answer) == pytest.approx(1000.0)
    listens = [e.response_listen for e in probe.seen if e.HasField("response_listen")]
    assert [listen.reason for listen in listens] == ["model_listen"]
    assert endings(probe.seen) == {done.id: 1}


async def test_a_listen_inside_a_response_does_not_end_it(layer: Any) -> None:
    """In a session that commits its turns, vLLM-Omni's ``response.listen`` names the
    response the model listened in, which stays open (vLLM-Omni may feed the model more
    units for it) until its ``response.done``: here the one a cancel brings."""
    engine = make_engine(layer)
    probe = await open_probe(engine)
    try:
        await speak_turn(probe)
        layer.speak(duplex_id(probe), "one ", 0.5)
        await probe.until("output_audio_delta")
        assert layer.listen(duplex_id(probe))
        await probe.until("response_listen")
        await probe.send(cancel_response=pb.CancelResponse())
        await probe.until("response_done")
    finally:
        await probe.close()
        await engine.stop()
    (answer,) = check_lifecycles(probe.seen).values()
    done = answer[-1].response_done.response
    assert (done.status, done.status_reason) == (pb.RESPONSE_STATUS_CANCELLED, "client_cancelled")
    assert endings(probe.seen) == {done.id: 1}


async def test_refusals_name_the_command_that_was_refused(layer: Any) -> None:
    engine = make_engine(layer)
    probe = await open_probe(engine)
    try:
        seq = await probe.send(cancel_response=pb.CancelResponse())
        error = (await probe.until("error"))[-1].error
        assert (error.code, error.client_seq) == ("response_not_active", seq)
        seq = await probe.send(commit_input_audio=pb.CommitInputAudio())
        error = (await probe.until("error"))[-1].error
        assert (error.code, error.client_seq) == ("input_audio_buffer_empty", seq)
        # A command that is no engine command never reaches an engine: no typed value
        # carries it (the core refuses it on the stream, before any engine).
        with pytest.raises(ValueError, match="not a command for the engine"):
            await probe.send(open_session=pb.OpenSession())
    finally:
        await probe.close()
        await engine.stop()


async def test_playback_acks_reach_the_playback_ledger(layer: Any) -> None:
    engine = make_engine(layer)
    probe = await open_probe(engine)
    try:
        await speak_turn(probe)
        layer.speak(duplex_id(probe), "one two.", 2.0, turn_end=True)
        done = (await probe.until("response_done"))[-1].response_done.response
        await probe.send(ack_playback=pb.AckPlayback(played_ms=2000.0, response_id=done.id))
        ack = (await probe.until("playback_acknowledged"))[-1].playback_acknowledged
        assert (ack.item_id, ack.played_ms, ack.committed_ms) == (done.output[0].id, 2000, 2000)
        assert ack.history_committed
        runner = layer.runner(duplex_id(probe))
        assert runner.session.history[-1] == {"role": "assistant", "content": "one two."}
    finally:
        await probe.close()
        await engine.stop()


async def test_two_sessions_do_not_mix(layer: Any) -> None:
    engine = make_engine(layer)
    first, second = await open_probe(engine, "a"), await open_probe(engine, "b")
    try:
        await speak_turn(first, 0.5)
        await speak_turn(second, 1.5)
        layer.speak(duplex_id(second), "second.", 1.0, turn_end=True)
        layer.speak(duplex_id(first), "first.", 0.5, turn_end=True)
        done_second = (await second.until("response_done"))[-1].response_done.response
        done_first = (await first.until("response_done"))[-1].response_done.response
    finally:
        await first.close()
        await second.close()
        await engine.stop()
    assert done_first.output[0].content[0].transcript == "first."
    assert done_second.output[0].content[0].transcript == "second."
    assert done_first.usage.input_audio_ms == pytest.approx(500.0)
    assert done_second.usage.input_audio_ms == pytest.approx(1500.0)
    assert set(check_lifecycles(first.seen)) == {done_first.id}
    assert set(check_lifecycles(second.seen)) == {done_second.id}


async def test_the_model_answers_on_its_own_when_it_owns_the_turns(layer: Any) -> None:
    engine = make_engine(layer, auto_response="true")
    probe = await open_probe(engine)
    try:
        await probe.append(voice_like(1.0), chunk_ms=100)
        assert "speech_started" in kinds(await probe.quiet(0.2))
        assert layer.model.audio_units() == 1  # streamed to the model as it came, no commit
        layer.speak(duplex_id(probe), "I heard you.", 1.0, turn_end=True)
        events = await probe.until("response_done")
    finally:
        await probe.close()
        await engine.stop()
    (answer,) = check_lifecycles(events).values()
    assert answer[-1].response_done.response.status == pb.RESPONSE_STATUS_COMPLETED


async def test_close_ends_the_stream_and_frees_the_model_request(layer: Any) -> None:
    engine = make_engine(layer)
    probe = await open_probe(engine)
    await speak_turn(probe)
    layer.speak(duplex_id(probe), "words", 1.0)
    await probe.until("output_audio_delta")
    session_id = duplex_id(probe)
    await probe.close()
    assert session_id not in layer.manager.runners
    assert layer.model.cleanups and layer.model.cleanups[-1][1] is True
    assert probe.failure is None
    await engine.stop()


async def test_a_session_vllm_omni_ends_ends_with_an_engine_error(layer: Any) -> None:
    engine = make_engine(layer)
    probe = await open_probe(engine)
    try:
        expired = await layer.manager.reap_expired(now=time.monotonic() + 3600)
        assert expired == 1
        await probe.stream_end()
        assert isinstance(probe.failure, EngineError)
        assert "idle" in str(probe.failure.__cause__)
    finally:
        await probe.close()
        await engine.stop()
