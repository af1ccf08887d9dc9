"""The vllm-omni engine's translation, on its own: our commands out, Realtime wire events in.

No vLLM-Omni here (these run in the main environment): commands are built with a stand-in
for vLLM-Omni's command classes that records what it was given, and events are the wire
objects vLLM-Omni's ``to_realtime()`` writes. tests/vllm/omni checks the same translation
against vLLM-Omni's real session layer.
"""

from __future__ import annotations

import base64

import numpy as np
import pytest

from omni_grpc import audio
from omni_grpc.core.commands import engine_command
from omni_grpc.engine.vllm_omni.commands import Correlation, command_for, realtime_session
from omni_grpc.engine.vllm_omni.events import EventTranslator
from omni_grpc.wire import pb
from tests.engine.conformance import check_lifecycles, kinds


class Recorder:
    """Stands in for vLLM-Omni's command module: ``Name(**fields)`` -> (Name, fields)."""

    def __getattr__(self, name: str) -> object:
        return lambda **fields: (name, fields)


def test_commands_carry_their_fields_and_our_event_id() -> None:
    commands = Recorder()
    correlation = Correlation("s1")

    def translated(answers: bool | None = True, **command: object) -> object:
        request = pb.ConverseRequest(client_seq=5, event_id="client-5", **command)  # type: ignore[arg-type]
        ours = engine_command(request)
        return command_for(ours, commands, correlation.event_id(ours), answers)

    append = translated(append_input_audio=pb.AppendInputAudio(audio=b"\x01\x00\x02\x00"))
    assert append == (
        "AppendAudio",
        {
            "audio": b"\x01\x00\x02\x00",
            "format": "pcm16",
            "sample_rate_hz": 16000,
            "is_speech": None,
            "video_frames": (),
            "hints": {},
            "event_id": "s1:5",
        },
    )
    assert translated(commit_input_audio=pb.CommitInputAudio())[1]["create_response"] is True
    assert translated(None, commit_input_audio=pb.CommitInputAudio())[1]["create_response"] is None
    off = pb.CommitInputAudio(create_response=False)
    assert translated(True, commit_input_audio=off)[1]["create_response"] is False
    create = translated(
        create_response=pb.CreateResponse(output_modalities=[pb.MODALITY_TEXT], instructions="hi")
    )
    assert create[1]["options"] == {"modalities": ["text"], "instructions": "hi"}
    ack = translated(ack_playback=pb.AckPlayback(played_ms=1234.9, response_id="r"))
    assert ack[1] | {"event_id": None} == {
        "played_ms": 1234,
        "committed_ms": None,
        "response_id": "r",
        "item_id": None,
        "event_id": None,
    }
    retrieve = translated(retrieve_conversation_item=pb.RetrieveConversationItem(item_id="i"))
    assert retrieve[1]["signal_payload"] == {"item_id": "i"}
    assert translated(barge_in=pb.BargeIn())[0] == "BargeIn"
    # A stream command is no engine command: no typed value carries it to an engine at all.
    with pytest.raises(ValueError, match="heartbeat is not a command for the engine"):
        translated(heartbeat=pb.Heartbeat())
    # Input the core and the edge should have made canonical is a bug, asserted, not refused.
    with pytest.raises(AssertionError):
        translated(append_input_audio=pb.AppendInputAudio(audio=b"\0\0", sample_rate_hz=24000))
    assert correlation.command("s1:5") == (5, "client-5")
    assert correlation.command("elsewhere") == (0, "")


def test_an_append_passes_its_frames_and_hints_on() -> None:
    jpeg = b"\xff\xd8\xff\xe0frame"
    append = pb.AppendInputAudio(
        audio=b"\0\0", video_frames=[pb.VideoFrame(data=jpeg, mime_type="image/jpeg")]
    )
    append.hints.update({"is_speech": False, "vad": {"speech_probability": 0.25}, "n": 2})
    request = pb.ConverseRequest(client_seq=1, append_input_audio=append)
    name, fields = command_for(engine_command(request), Recorder(), "s:1", None)
    assert name == "AppendAudio"
    assert fields["video_frames"] == (base64.b64encode(jpeg).decode(),)
    # vLLM-Omni reads is_speech as a field of its own; the hints go whole, counts as ints.
    assert fields["is_speech"] is False
    assert fields["hints"] == {"is_speech": False, "vad": {"speech_probability": 0.25}, "n": 2}
    assert isinstance(fields["hints"]["n"], int)


def test_the_session_engine_options_are_vllm_omnis_extra_body() -> None:
    config = pb.SessionConfig()
    # A vLLM-Omni client's extra_body (kept whole by the bridge) wins over the other options.
    config.engine_options.update(
        {"sliding_window_mode": "basic", "auto_response": True,
         "extra_body": {"force_listen_count": 0, "auto_response": False}}
    )  # fmt: skip
    session = realtime_session(config, {"auto_response": True, "model_default": "x"})
    assert session["extra_body"] == {
        "auto_response": False,
        "model_default": "x",
        "sliding_window_mode": "basic",
        "force_listen_count": 0,
    }
    assert isinstance(session["extra_body"]["force_listen_count"], int)  # type: ignore[index]


def test_the_session_object_asks_for_canonical_audio_and_the_voice() -> None:
    config = pb.SessionConfig(output_modalities=[pb.MODALITY_TEXT], instructions="Be brief.")
    config.engine_options.update({"ref_audio": "data:audio/wav;base64,AAAA"})
    session = realtime_session(config, {"auto_response": False})
    assert session == {
        "modalities": ["text"],
        "input_audio_format": "pcm16",
        "output_audio_format": "pcm16",
        "instructions": "Be brief.",
        "turn_detection": None,
        "extra_body": {"auto_response": False, "ref_audio": "data:audio/wav;base64,AAAA"},
    }


def wire_audio(seconds: float, rate: int) -> str:
    samples = (0.3 * np.sin(np.arange(int(rate * seconds)) / 7)).astype(np.float32)
    return base64.b64encode(audio.encode(samples, pb.AUDIO_ENCODING_PCM16, rate)).decode()


def test_a_response_is_told_the_way_our_contract_tells_it() -> None:
    translator = EventTranslator(lambda event_id: (9, "mine") if event_id == "s:9" else (0, ""))
    translator.appended(750.0)
    assert translator.committing()
    ids = {"response_id": "r1", "item_id": "item_r1"}
    assistant = {"id": "item_r1", "role": "assistant", "status": "completed"}
    wire = [
        {"type": "input_audio_buffer.committed", "item_id": "u1", "previous_item_id": None},
        {"type": "conversation.item.added", "item": {"id": "u1", "role": "user"}},
        {"type": "response.created", "response_id": "r1", "response": {"id": "r1"}},
        {"type": "conversation.item.added", "item": assistant},  # dropped: response_done has it
        {"type": "response.output_item.added", "response_id": "r1", "item": assistant},
        {"type": "response.output_audio.delta", **ids, "delta": wire_audio(0.5, 16000),
         "format": "pcm16", "sample_rate_hz": 16000},
        {"type": "response.output_audio_transcript.delta", **ids, "delta": "hi "},
        {"type": "response.output_audio.delta", **ids, "delta": wire_audio(0.25, 24000),
         "format": "pcm16", "sample_rate_hz": 24000},
        {"type": "response.output_audio.done", **ids},
        {"type": "error", "error": {"code": "response_already_active", "message": "busy",
                                    "event_id": "s:9"}},
        {"type": "response.done", "response_id": "r1", "response": {
            "id": "r1", "status": "completed", "status_details": {"reason": "stop"},
            "output": [assistant | {"content": [{"type": "output_audio", "transcript": "hi "}]}],
        }},
        {"type": "session.updated", "session": {}},
    ]  # fmt: skip
    events = [event for item in wire for event in translator.translate(item)]
    assert kinds(events) == [
        "input_committed",
        "item_added",
        "response_created",
        "output_audio_delta",
        "output_audio_transcript_delta",
        "output_audio_delta",
        "error",
        "response_done",
    ]
    assert events[0].input_committed.audio_duration_ms == 750.0
    assert events[2].response_created.item_id == "item_r1"
    (answer,) = check_lifecycles(events).values()  # canonical audio, no gaps on the clock
    assert [
        e.output_audio_delta.duration_ms for e in answer if e.HasField("output_audio_delta")
    ] == [
        pytest.approx(500.0),
        pytest.approx(250.0),
    ]
    assert (events[6].error.code, events[6].error.client_seq, events[6].error.event_id) == (
        "response_already_active",
        9,
        "mine",
    )
    done = events[-1].response_done.response
    assert (done.status, done.status_reason) == (pb.RESPONSE_STATUS_COMPLETED, "stop")
    assert done.usage.output_audio_ms == pytest.approx(750.0)
    assert done.usage.input_audio_ms == 750.0
    assert done.output[0].content[0].transcript == "hi "
    assert 0 < done.latency.first_audio_ms <= done.latency.total_ms


def test_audio_that_is_not_pcm16_base64_is_a_fault() -> None:
    translator = EventTranslator(lambda event_id: (0, ""))
    translator.translate({"type": "response.created", "response_id": "r", "response": {}})
    for bad in ({"format": "wav", "delta": "AAAA"}, {"format": "pcm16", "delta": "not base64!"}):
        with pytest.raises(ValueError):
            translator.translate({"type": "response.output_audio.delta", "response_id": "r", **bad})


def test_a_code_outside_our_closed_set_becomes_engine_error_and_keeps_its_name() -> None:
    translator = EventTranslator(lambda event_id: (0, ""))
    ours, foreign = (
        translator.translate({"type": "error", "error": {"code": code, "message": "busy"}})[0].error
        for code in ("response_already_active", "worker_overloaded")
    )
    assert (ours.code, ours.message) == ("response_already_active", "busy")
    assert (foreign.code, foreign.message) == ("engine_error", "worker_overloaded: busy")
    assert foreign.type == pb.ERROR_TYPE_SERVER
