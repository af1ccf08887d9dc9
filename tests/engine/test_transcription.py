"""Transcription sessions on the engines without models: the loopback's deterministic
transcript, its logprobs, no response, and the kit's events for a transcript and a failure."""

from __future__ import annotations

from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import Limits
from omni_grpc.engine.kit.transcripts import transcription_failed, word_logprobs
from omni_grpc.engine.loopback import LoopbackEngine
from omni_grpc.wire import pb

from .conformance import EngineSpec, Probe, kinds


async def transcription_probe(**config: object) -> tuple[LoopbackEngine, Probe]:
    engine = LoopbackEngine({"pace": "fast"})
    asked = pb.SessionConfig(type=pb.SESSION_TYPE_TRANSCRIPTION, **config)  # type: ignore[arg-type]
    resolved = resolve_config(asked, Limits(), engine.features)
    session = await engine.open_session("s1", resolved)
    return engine, Probe(session, EngineSpec("loopback", lambda: engine).timeout_s)


async def test_a_committed_turn_is_written_down_and_not_answered() -> None:
    settings = pb.InputTranscriptionConfig(language="fr", prompt="Zoë")
    engine, probe = await transcription_probe(input_transcription=settings)
    try:
        await probe.append(bytes(16_000 * 2 // 2))  # half a second of silence at 16 kHz
        await probe.send(commit_input_audio=pb.CommitInputAudio())
        events = await probe.until("item_done")
        assert kinds(events) == [
            "input_committed",
            "item_added",
            "input_transcription_delta",
            "input_transcription",
            "item_done",
        ]
        text = "0.50 seconds of audio in fr, prompted 'Zoë'"
        delta, transcript, done = events[2], events[3], events[4]
        assert delta.input_transcription_delta.delta == text
        assert transcript.input_transcription.transcript == text
        assert not transcript.input_transcription.logprobs  # not asked for
        assert done.item_done.item.content[0].transcript == text
        assert not [e for e in await probe.quiet(0.3) if e.HasField("response_created")]
    finally:
        await engine.stop()


async def test_logprobs_come_when_asked() -> None:
    engine, probe = await transcription_probe(transcription_logprobs=True)
    try:
        await probe.append(bytes(16_000 * 2))
        await probe.send(commit_input_audio=pb.CommitInputAudio())
        events = await probe.until("input_transcription")
        logprobs = events[-1].input_transcription.logprobs
        assert [(p.token, p.logprob, p.bytes) for p in logprobs] == [
            ("1.00", 0.0, b"1.00"),
            (" seconds", 0.0, b" seconds"),
            (" of", 0.0, b" of"),
            (" audio", 0.0, b" audio"),
        ]
    finally:
        await engine.stop()


async def test_a_realtime_session_of_the_loopback_sends_no_transcript() -> None:
    engine = LoopbackEngine({"pace": "fast"})
    config = resolve_config(pb.SessionConfig(), Limits(), engine.features)
    probe = Probe(await engine.open_session("s1", config), 5.0)
    try:
        await probe.append(bytes(16_000))
        await probe.send(commit_input_audio=pb.CommitInputAudio())
        events = await probe.until("response_done")
        assert "input_transcription" not in kinds(events)
    finally:
        await engine.stop()


def test_a_failure_is_a_typed_server_error_naming_the_item() -> None:
    event = transcription_failed("item_1", RuntimeError("decoder crashed"))
    failed = event.input_transcription_failed
    assert (failed.item_id, failed.error.code, failed.error.type) == (
        "item_1",
        "transcription_failed",
        pb.ERROR_TYPE_SERVER,
    )
    assert "RuntimeError: decoder crashed" in failed.error.message
    assert [p.token for p in word_logprobs("a b")] == ["a", " b"]
