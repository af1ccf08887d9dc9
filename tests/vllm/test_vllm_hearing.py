"""The vllm engine hears for itself: Silero ends a spoken turn, and speech over a reply is judged
by its length (the model hears audio, not words): a short sound pauses the reply, which then
goes on; a long one ends it. Real speech made by espeak-ng, as the embedded tests make it."""

from __future__ import annotations

from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import Limits
from omni_grpc.engine.vllm import VllmEngine
from omni_grpc.wire import pb
from tests.engine.conformance import Probe
from tests.scripts import load_script

from .support import VLLM_MARKS, make_engine

pytestmark = VLLM_MARKS


speech = load_script("make_test_speech")


async def test_semantic_vad_is_the_eagernesss_silence_and_words_are_refused() -> None:
    engine = make_engine(server_vad="on")
    features = engine.features
    assert features.supports_server_vad and not features.supports_semantic_vad
    asked = pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SEMANTIC_VAD, eagerness=pb.EAGERNESS_LOW)
    td = resolve_config(pb.SessionConfig(turn_detection=asked), Limits(), features).turn_detection
    assert (td.type, td.silence_duration_ms) == (pb.TURN_DETECTION_TYPE_SERVER_VAD, 1000)
    assert not features.supports_interruption_by_words


async def test_a_short_sound_pauses_the_reply_and_a_long_one_ends_it() -> None:
    # A long answer, spoken at real time: the speech over it finds it running.
    engine: VllmEngine = make_engine(server_vad="on", min_tokens="200", max_tokens="200", speed="1")
    await engine.start()
    rules = pb.InterruptionConfig(min_duration_ms=700, resume_false_interruption=True)
    config = resolve_config(pb.SessionConfig(interruption=rules), Limits(), engine.features)
    probe = Probe(await engine.open_session("overlap", config), 60.0)
    try:
        question = speech.Scene().pause(300).speak("tell me a long story").pause(800)
        await probe.append(question.pcm16(), chunk_ms=40)
        created = (await probe.until("response_created"))[-1].response_created.response
        await probe.until("output_audio_delta")
        await probe.append(speech.Scene().pause(200).speak("okay").pause(800).pcm16())
        pause = (await probe.until("overlap_decision"))[-1].overlap_decision
        resume = (await probe.until("overlap_decision"))[-1].overlap_decision
        long = speech.Scene().pause(200).speak("wait a second, please stop talking").pause(800)
        await probe.append(long.pcm16())
        events = await probe.until(
            "response_done", lambda e: e.response_done.response.id == created.id
        )
    finally:
        await probe.close()
        await engine.stop()
    assert (pause.action, pause.response_id) == (pb.OVERLAP_ACTION_PAUSE, created.id)
    assert (resume.action, resume.reason) == (pb.OVERLAP_ACTION_RESUME, "too_short")
    cut = [e.overlap_decision for e in events if e.HasField("overlap_decision")][-1]
    assert (cut.action, cut.reason) == (pb.OVERLAP_ACTION_BARGE_IN, "min_duration")
    done = events[-1].response_done.response
    assert (done.status, done.status_reason) == (pb.RESPONSE_STATUS_CANCELLED, "turn_detected")
