"""Golden tests of the inbound dialect: Realtime client JSON → Protobuf commands, and refusals."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from google.protobuf import json_format

from bridge.realtime import client_events as ce
from bridge.realtime.inbound import (
    MAX_EVENT_BYTES,
    DialectError,
    decode_client_event,
    open_request,
    resume_request,
    to_request,
)
from bridge.relay import is_numbered
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import (
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_CHARS,
)


def translate(event: dict[str, Any]) -> pb.ConverseRequest:
    return to_request(decode_client_event(orjson.dumps(event)))


def refusal(frame: str | bytes) -> DialectError:
    with pytest.raises(DialectError) as caught:
        to_request(decode_client_event(frame))
    return caught.value


def as_dict(request: pb.ConverseRequest) -> dict[str, Any]:
    return json_format.MessageToDict(request, preserving_proto_field_name=True)


GA_UPDATE = {
    "type": "session.update",
    "event_id": "evt_client_1",
    "session": {
        "type": "realtime",
        "model": "gpt-realtime",
        "instructions": "Be brief.",
        "output_modalities": ["audio"],
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 16000},
                "turn_detection": {
                    "type": "server_vad",
                    "threshold": 0.6,
                    "silence_duration_ms": 400,
                    "create_response": False,
                    "idle_timeout_ms": 5000,
                },
                "transcription": {"model": "whisper-1", "language": "en"},
            },
            "output": {"format": {"type": "audio/pcmu"}, "voice": "marin"},
        },
        "max_output_tokens": 512,
        "tools": [],
        "tool_choice": "auto",
        "overlap_policy": "barge_in_on_speech",
        "playback_commit_policy": "ack_only",
        "interruption": {"mode": "words", "min_words": 2, "resume_false_interruption": True},
        "idle_timeout_ms": 60000,
        "engine_options": {"pace": "fast"},
    },
}
GA_CONFIG = {
    "type": "SESSION_TYPE_REALTIME",
    "model": "gpt-realtime",
    "output_modalities": ["MODALITY_AUDIO"],
    "instructions": "Be brief.",
    "voice": "marin",
    "input_audio_format": {"encoding": "AUDIO_ENCODING_PCM16", "sample_rate_hz": 16000},
    "output_audio_format": {"encoding": "AUDIO_ENCODING_G711_ULAW", "sample_rate_hz": 8000},
    "turn_detection": {
        "type": "TURN_DETECTION_TYPE_SERVER_VAD",
        "threshold": 0.6,
        "silence_duration_ms": 400,
        "create_response": False,
        "idle_timeout_ms": 5000,
    },
    "overlap_policy": "OVERLAP_POLICY_BARGE_IN_ON_SPEECH",
    "interruption": {
        "mode": "INTERRUPTION_MODE_WORDS",
        "min_words": 2,
        "resume_false_interruption": True,
    },
    "playback_commit_policy": "PLAYBACK_COMMIT_POLICY_ACK_ONLY",
    "idle_timeout": "60s",
    "max_output_tokens": 512,
    # OpenAI's model names mean "transcribe": the engine's default model.
    "input_transcription": {"enabled": True, "language": "en"},
    "engine_options": {"pace": "fast"},
    # An empty tool list is sent as one: it removes every tool.
    "tools": {},
    "tool_choice": {"mode": "TOOL_CHOICE_MODE_AUTO"},
}


def test_ga_session_update_becomes_a_partial_config() -> None:
    assert as_dict(translate(GA_UPDATE)) == {
        "event_id": "evt_client_1",
        "update_session": {"config": GA_CONFIG},
    }


def test_beta_spellings_give_the_same_config() -> None:
    beta = {
        "type": "session.update",
        "event_id": "evt_client_1",
        "session": {
            "type": "realtime",
            "model": "gpt-realtime",
            "instructions": "Be brief.",
            "modalities": ["audio"],
            "input_audio_format": {"type": "audio/pcm", "rate": 16000},
            "output_audio_format": "g711_ulaw",
            "voice": "marin",
            "turn_detection": {
                "type": "server_vad",
                "threshold": 0.6,
                "silence_duration_ms": 400,
                "create_response": False,
                "idle_timeout_ms": 5000,
            },
            "input_audio_transcription": {"model": "whisper-1", "language": "en"},
            "max_response_output_tokens": 512,
            "overlap_policy": "barge_in_on_speech",
            "playback_commit_policy": "ack_only",
            "interruption": {"mode": "words", "min_words": 2, "resume_false_interruption": True},
            "idle_timeout_s": 60,
            "engine_options": {"pace": "fast"},
            "tools": [],
            "tool_choice": "auto",
        },
    }
    assert as_dict(translate(beta)) == as_dict(translate(GA_UPDATE))


def test_null_turns_off_and_absence_leaves_alone() -> None:
    off = translate(
        {
            "type": "session.update",
            "session": {"audio": {"input": {"turn_detection": None, "transcription": None}}},
        }
    )
    config = off.update_session.config
    assert config.turn_detection.type == pb.TURN_DETECTION_TYPE_NONE
    assert config.HasField("input_transcription") and not config.input_transcription.enabled
    untouched = translate({"type": "session.update", "session": {"instructions": ""}})
    config = untouched.update_session.config
    assert not config.HasField("turn_detection")
    assert not config.HasField("input_transcription")
    assert config.HasField("instructions") and config.instructions == ""  # "" clears


def test_inf_max_tokens_and_semantic_vad_with_its_eagerness() -> None:
    request = translate(
        {
            "type": "session.update",
            "session": {
                "max_output_tokens": "inf",
                "audio": {
                    "input": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}}
                },
            },
        }
    )
    config = request.update_session.config
    assert not config.HasField("max_output_tokens")
    # The eagerness travels as it is; the service decides what serves it on this engine.
    detection = config.turn_detection
    assert detection.type == pb.TURN_DETECTION_TYPE_SEMANTIC_VAD
    assert (detection.eagerness, detection.silence_duration_ms) == (pb.EAGERNESS_LOW, 0)
    # GA replaces turn detection whole: an idle timeout it does not name is off.
    assert detection.HasField("idle_timeout_ms") and detection.idle_timeout_ms == 0


@pytest.mark.parametrize("turn_detection", [{"type": "semantic_vad"}, {"type": "server_vad"}])
def test_eagerness_is_auto_on_semantic_vad_that_names_none_and_unset_elsewhere(
    turn_detection: dict[str, Any],
) -> None:
    session = {"turn_detection": turn_detection}
    config = translate({"type": "session.update", "session": session}).update_session.config
    semantic = turn_detection["type"] == "semantic_vad"
    assert config.turn_detection.eagerness == (
        pb.EAGERNESS_AUTO if semantic else pb.EAGERNESS_UNSPECIFIED
    )


def test_turning_turn_detection_off_turns_its_idle_timeout_off() -> None:
    session = {"audio": {"input": {"turn_detection": None}}}
    config = translate({"type": "session.update", "session": session}).update_session.config
    assert config.turn_detection.type == pb.TURN_DETECTION_TYPE_NONE
    assert config.turn_detection.HasField("idle_timeout_ms")
    assert config.turn_detection.idle_timeout_ms == 0


@pytest.mark.parametrize(
    ("session", "code", "param"),
    [
        ({"type": "translation"}, "unsupported_session_type", "session.type"),
        (
            {"audio": {"input": {"format": {"type": "audio/opus"}}}},
            "unsupported_audio_format",
            "session.audio.input.format",
        ),
        ({"output_audio_format": "mp3"}, "unsupported_audio_format", "session.audio.output.format"),
        (
            {"turn_detection": {"type": "push_to_talk"}},
            "unsupported_turn_detection",
            "turn_detection.type",
        ),
        ({"max_output_tokens": 0}, "invalid_session_config", "session.max_output_tokens"),
        ({"overlap_policy": "sometimes"}, "bad_event", "session.overlap_policy"),
        ({"idle_timeout_ms": -1}, "bad_event", "session.idle_timeout_ms"),
        (
            {"turn_detection": {"type": "semantic_vad", "eagerness": "eventually"}},
            "bad_event",
            "session.turn_detection.eagerness",
        ),
        (
            {"turn_detection": {"type": "server_vad", "idle_timeout_ms": -5}},
            "bad_event",
            "session.turn_detection.idle_timeout_ms",
        ),
        ({"interruption": {"mode": "loud"}}, "bad_event", "session.interruption.mode"),
        (
            {"interruption": {"min_words": "two"}},
            "bad_event",
            "session.interruption.min_words",
        ),
    ],
)
def test_session_update_refusals(session: dict[str, Any], code: str, param: str) -> None:
    error = refusal(orjson.dumps({"type": "session.update", "event_id": "e9", "session": session}))
    assert (error.code, error.param, error.event_id) == (code, param, "e9")


def test_append_decodes_base64_and_keeps_the_session_rate_unless_told() -> None:
    pcm = bytes(range(256)) * 4
    audio = base64.b64encode(pcm).decode()
    request = translate({"type": "input_audio_buffer.append", "audio": audio})
    assert request.append_input_audio == pb.AppendInputAudio(audio=pcm)  # 0: session format
    told = translate(
        {
            "type": "input_audio_buffer.append",
            "audio": audio,
            "format": {"type": "audio/pcm", "rate": 16000},
            "audio_end_ms": 500.0,
        }
    )
    assert told.append_input_audio == pb.AppendInputAudio(
        audio=pcm, encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=16000, audio_end_ms=500.0
    )
    beta = translate(
        {
            "type": "input_audio_buffer.append",
            "delta": audio,
            "sample_rate": 8000,
            "format": "g711_alaw",
        }
    )
    assert beta.append_input_audio == pb.AppendInputAudio(
        audio=pcm, encoding=pb.AUDIO_ENCODING_G711_ALAW, sample_rate_hz=8000
    )


@pytest.mark.parametrize("audio", ["AAA", "AA=A", "AAAA\n", "not base64!", "ÅÅÅÅ"])
def test_bad_base64_is_bad_audio(audio: str) -> None:
    error = refusal(
        orjson.dumps({"type": "input_audio_buffer.append", "event_id": "a1", "audio": audio})
    )
    assert (error.code, error.param, error.event_id) == ("bad_audio", "audio", "a1")


@pytest.mark.parametrize(
    ("frame", "code", "param"),
    [
        (b"{not json", "invalid_json", ""),
        (b"[1, 2]", "bad_event", "type"),
        (b'{"type": 7}', "bad_event", "type"),
        (b'{"event_id": "x"}', "bad_event", "type"),
        (b'{"type": "response.explode"}', "unknown_event", "type"),
        (b'{"type": "transcription_session.update"}', "unknown_event", "type"),
        (b'{"type": "input_audio_buffer.append"}', "bad_event", "audio"),
        (b'{"type": "playback.ack", "played_ms": "12"}', "bad_event", "played_ms"),
        (b'{"type": "playback.ack", "played_ms": -1}', "bad_event", "played_ms"),
        (
            b'{"type": "session.event_ack", "server_event_seq": true}',
            "bad_event",
            "server_event_seq",
        ),
        (b'{"type": "conversation.item.truncate", "item_id": "i"}', "bad_event", "audio_end_ms"),
    ],
)
def test_envelope_refusals(frame: bytes, code: str, param: str) -> None:
    error = refusal(frame)
    assert (error.code, error.param) == (code, param)


def test_unknown_event_echoes_the_client_event_id() -> None:
    assert refusal(b'{"type": "nope", "event_id": "c7"}').event_id == "c7"


def test_an_error_quotes_and_echoes_only_a_bounded_part_of_what_the_client_sent() -> None:
    # Echoed whole, a frame of quotes came back three times its size (escaped), per error.
    huge = "'" * 100_000
    error = refusal(orjson.dumps({"type": huge, "event_id": huge}))
    assert error.code == "unknown_event" and error.refusal().event_id == ""
    assert len(error.message) < 200 and "(100000 characters)" in error.message


def test_oversized_frame_is_refused_before_parsing() -> None:
    frame = b'{"type":"input_audio_buffer.append","audio":"' + b"A" * MAX_EVENT_BYTES + b'"}'
    assert refusal(frame).code == "event_too_large"


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"type": "input_audio_buffer.commit"}, {"commit_input_audio": {"create_response": False}}),
        (
            {"type": "input_audio_buffer.commit", "create_response": True},
            {"commit_input_audio": {"create_response": True}},
        ),
        ({"type": "input.commit"}, {"commit_input_audio": {"create_response": True}}),
        (
            {"type": "input.commit", "response_create": False},
            {"commit_input_audio": {"create_response": False}},
        ),
        ({"type": "input_audio_buffer.clear"}, {"clear_input_audio": {}}),
        (
            {"type": "output_audio_buffer.clear", "response_id": "r1"},
            {"clear_output_audio": {"response_id": "r1"}},
        ),
        ({"type": "response.create"}, {"create_response": {}}),
        (
            {
                "type": "response.create",
                "response": {
                    "modalities": ["text"],
                    "instructions": "x",
                    "metadata": {"topic": "a"},
                    "tools": [],
                },
            },
            {
                "create_response": {
                    "output_modalities": ["MODALITY_TEXT"],
                    "instructions": "x",
                    "metadata": {"topic": "a"},
                    "tools": {},  # the response's own, empty: it may call nothing
                }
            },
        ),
        (
            {
                "type": "response.create",
                "response": {
                    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
                    "tool_choice": {"type": "function", "name": "f"},
                },
            },
            {
                "create_response": {
                    "tools": {
                        "tools": [
                            {
                                "type": "function",
                                "name": "f",
                                "parameters_json": '{"type":"object"}',
                            }
                        ]
                    },
                    "tool_choice": {"mode": "TOOL_CHOICE_MODE_FUNCTION", "function_name": "f"},
                }
            },
        ),
        (
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            },
            {
                "create_conversation_item": {
                    "item": {
                        "type": "ITEM_TYPE_FUNCTION_CALL_OUTPUT",
                        "call_id": "c1",
                        "output": "ok",
                    }
                }
            },
        ),
        (
            {
                "type": "conversation.item.create",
                "previous_item_id": "i0",
                "item": {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            },
            {
                "create_conversation_item": {
                    "item": {
                        "type": "ITEM_TYPE_FUNCTION_CALL",
                        "call_id": "c1",
                        "name": "f",
                        "arguments": "{}",
                    },
                    "previous_item_id": "i0",
                }
            },
        ),
        ({"type": "response.cancel"}, {"cancel_response": {}}),
        (
            {"type": "conversation.item.retrieve", "item_id": "i1"},
            {"retrieve_conversation_item": {"item_id": "i1"}},
        ),
        (
            {"type": "conversation.item.delete", "item_id": "i1"},
            {"delete_conversation_item": {"item_id": "i1"}},
        ),
        (
            {
                "type": "conversation.item.truncate",
                "item_id": "i1",
                "content_index": 0,
                "audio_end_ms": 1500,
            },
            {"truncate_conversation_item": {"item_id": "i1", "audio_end_ms": 1500.0}},
        ),
        ({"type": "session.event_ack", "server_event_seq": 42}, {"ack_events": {"seq": "42"}}),
        ({"type": "session.heartbeat"}, {"heartbeat": {}}),
        ({"type": "session.close"}, {"close_session": {}}),
        ({"type": "close", "reason": "bye"}, {"close_session": {"reason": "bye"}}),
        (
            {
                "type": "playback.ack",
                "played_ms": 1200,
                "committed_ms": 1000.5,
                "response_id": "r1",
                "truncate": True,
            },
            {
                "ack_playback": {
                    "played_ms": 1200.0,
                    "committed_ms": 1000.5,
                    "response_id": "r1",
                    "truncate": True,
                }
            },
        ),
        ({"type": "audio.playback_ack", "played_ms": 5}, {"ack_playback": {"played_ms": 5.0}}),
        ({"type": "input.cancel"}, {"cancel_input": {}}),
        ({"type": "barge_in"}, {"barge_in": {}}),
        ({"type": "input.text.append", "text": "hello"}, {"append_input_text": {"text": "hello"}}),
        (
            {
                "type": "conversation.item.create",
                "previous_item_id": "i0",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "hi"},
                        {"type": "input_audio", "transcript": "said hi"},
                    ],
                },
            },
            {
                "create_conversation_item": {
                    "previous_item_id": "i0",
                    "item": {
                        "role": "ITEM_ROLE_USER",
                        "content": [
                            {"type": "CONTENT_TYPE_INPUT_TEXT", "text": "hi"},
                            {"type": "CONTENT_TYPE_INPUT_AUDIO", "transcript": "said hi"},
                        ],
                    },
                }
            },
        ),
    ],
)
def test_commands(event: dict[str, Any], expected: dict[str, Any]) -> None:
    assert as_dict(translate(event)) == expected


@pytest.mark.parametrize(
    "metadata",
    [
        {"ticket": 7},
        {f"k{index}": "v" for index in range(MAX_METADATA_PAIRS + 1)},
        {"k" * (MAX_METADATA_KEY_CHARS + 1): "v"},
        {"k": "v" * (MAX_METADATA_VALUE_CHARS + 1)},
    ],
    ids=["not-a-string", "pairs", "key", "value"],
)
def test_response_metadata_is_string_to_string_within_its_bounds(metadata: dict[str, Any]) -> None:
    refused = refusal(orjson.dumps({"type": "response.create", "response": {"metadata": metadata}}))
    assert refused.code == "bad_event"
    assert refused.param.startswith("response.metadata"), refused.param


def test_only_heartbeats_and_acks_go_unnumbered() -> None:
    assert not is_numbered(translate({"type": "session.heartbeat"}))
    assert not is_numbered(translate({"type": "session.event_ack", "server_event_seq": 1}))
    assert is_numbered(translate({"type": "input_audio_buffer.commit"}))
    assert is_numbered(translate({"type": "session.close"}))


@pytest.mark.parametrize(
    ("item", "code", "param"),
    [
        ({"type": "mcp_approval_response"}, "unsupported_item_type", "item.type"),
        (
            {"type": "message", "content": [{"type": "input_image", "image_url": "x"}]},
            "unsupported_content_type",
            "item.content.0.type",
        ),
        (
            {"type": "message", "content": [{"type": "input_audio", "audio": "not base64!"}]},
            "bad_audio",
            "item.content.0.audio",
        ),
    ],
)
def test_item_refusals(item: dict[str, Any], code: str, param: str) -> None:
    error = refusal(
        orjson.dumps({"type": "conversation.item.create", "event_id": "i9", "item": item})
    )
    assert (error.code, error.param, error.event_id) == (code, param, "i9")


def test_an_items_inline_audio_travels_as_its_bytes() -> None:
    part = {"type": "input_audio", "audio": base64.b64encode(b"\x01\x00\x02\x00").decode()}
    item = {"type": "message", "role": "user", "content": [part]}
    request = translate({"type": "conversation.item.create", "item": item})
    (made,) = request.create_conversation_item.item.content
    assert (made.type, made.audio) == (pb.CONTENT_TYPE_INPUT_AUDIO, b"\x01\x00\x02\x00")


def test_resume_is_a_handshake_not_a_command() -> None:
    event = decode_client_event(
        orjson.dumps(
            {
                "type": "session.resume",
                "event_id": "r1",
                "session_id": "s1",
                "resume_token": "tok",
                "last_received_server_event_seq": 17,
            }
        )
    )
    assert isinstance(event, ce.SessionResume)
    assert as_dict(resume_request(event)) == {
        "event_id": "r1",
        "resume_session": {"session_id": "s1", "resume_token": "tok", "last_received_seq": "17"},
    }
    with pytest.raises(DialectError) as caught:
        to_request(event)
    assert (caught.value.code, caught.value.event_id) == ("unsupported_session_resume", "r1")
    assert refusal(b'{"type": "session.resume", "session_id": "s1"}').param == "resume_token"


def test_open_request_takes_the_query_model_unless_the_update_names_one() -> None:
    assert open_request(model="m1").open_session.config.model == "m1"
    patch = ce.SessionPatch(model="m2")
    assert open_request(patch, model="m1").open_session.config.model == "m2"
    assert open_request().open_session.config == pb.SessionConfig()


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (
            {
                "conversation": "none",
                "metadata": {"purpose": "classify"},
                "output_modalities": ["text"],
                "max_output_tokens": 20,
                "audio": {"output": {"voice": "cedar"}},
                "input": [
                    {"type": "item_reference", "id": "item_1"},
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": "angry?"}],
                    },
                    {"type": "function_call_output", "call_id": "c1", "output": "{}"},
                ],
            },
            {
                "conversation": "RESPONSE_CONVERSATION_NONE",
                "metadata": {"purpose": "classify"},
                "output_modalities": ["MODALITY_TEXT"],
                "max_output_tokens": 20,
                "voice": "cedar",
                "input": {
                    "entries": [
                        {"item_reference": "item_1"},
                        {
                            "item": {
                                "role": "ITEM_ROLE_USER",
                                "content": [{"type": "CONTENT_TYPE_INPUT_TEXT", "text": "angry?"}],
                            }
                        },
                        {
                            "item": {
                                "type": "ITEM_TYPE_FUNCTION_CALL_OUTPUT",
                                "call_id": "c1",
                                "output": "{}",
                            }
                        },
                    ]
                },
            },
        ),
        # An empty input is set, and reads nothing; "auto" and "inf" ask for nothing.
        (
            {"conversation": "auto", "input": [], "max_output_tokens": "inf"},
            {"input": {}},
        ),
        # The beta spellings.
        (
            {"max_response_output_tokens": 7, "voice": {"id": "voice_1"}},
            {"max_output_tokens": 7, "voice": "voice_1"},
        ),
    ],
)
def test_a_responses_own_options(response: dict[str, Any], expected: dict[str, Any]) -> None:
    request = translate({"type": "response.create", "response": response})
    assert as_dict(request) == {"create_response": expected}
    assert request.create_response.HasField("input") == ("input" in response)


@pytest.mark.parametrize(
    ("response", "code", "param"),
    [
        ({"input": [{"type": "mcp_call"}]}, "unsupported_item_type", "response.input.0.type"),
        (
            {"input": [{"type": "message", "content": [{"type": "input_image"}]}]},
            "unsupported_content_type",
            "response.input.0.content.0.type",
        ),
        ({"max_output_tokens": 4097}, "bad_event", "response.max_output_tokens"),
    ],
)
def test_a_responses_own_options_refused(response: dict[str, Any], code: str, param: str) -> None:
    error = refusal(orjson.dumps({"type": "response.create", "response": response}))
    assert (error.code, error.param) == (code, param)
