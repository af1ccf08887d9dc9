"""Golden tests of the vLLM-Omni dialect, both ways: its endpoint's client JSON →
Protobuf commands, and contract events → the JSON vLLM-Omni's clients read."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from google.protobuf import json_format

from bridge.dialects import OPENAI, VLLM_OMNI, dialect_name, make_dialect
from bridge.errors import DialectError
from bridge.realtime.client_events import SessionUpdate
from bridge.realtime.session_config import audio_format
from bridge.vllm_omni.dialect import vllm_omni_dialect
from bridge.vllm_omni.inbound import VllmOmniInbound
from bridge.vllm_omni.outbound import VllmOmniOutbound
from omni_grpc.wire import pb

JPEG = b"\xff\xd8\xff\xe0 a frame"
PNG = b"\x89PNG\r\n\x1a\n a frame"


def translate(event: dict[str, Any]) -> pb.ConverseRequest:
    inbound = VllmOmniInbound()
    return inbound.to_request(inbound.decode(orjson.dumps(event)))


def refusal(event: dict[str, Any] | str) -> DialectError:
    inbound = VllmOmniInbound()
    frame = event if isinstance(event, str) else orjson.dumps(event)
    with pytest.raises(DialectError) as caught:
        inbound.to_request(inbound.decode(frame))
    return caught.value


def opening(session: dict[str, Any] | None) -> pb.SessionConfig:
    inbound = VllmOmniInbound()
    event = None
    if session is not None:
        event = inbound.decode(orjson.dumps({"type": "session.update", "session": session}))
        assert isinstance(event, SessionUpdate)
    return inbound.open_request(event, model="m").open_session.config


def rate(fmt: pb.AudioFormat) -> tuple[int, int]:
    return fmt.encoding, fmt.sample_rate_hz


@pytest.mark.parametrize(
    ("path", "query", "name"),
    [
        ("/v1/duplex", {}, VLLM_OMNI),
        ("/v1/realtime", {"duplex": "1"}, VLLM_OMNI),
        ("/v1/realtime", {"duplex": "true"}, VLLM_OMNI),
        ("/v1/realtime", {}, OPENAI),
        ("/v1/realtime", {"duplex": "0"}, OPENAI),
    ],
)
def test_the_references_path_and_query_choose_the_vllm_omni_dialect(
    path: str, query: dict[str, str], name: str
) -> None:
    assert dialect_name(path, query) == name


def test_a_bare_session_opens_at_pcm16_16khz_the_references_default() -> None:
    assert rate(opening(None).input_audio_format) == (pb.AUDIO_ENCODING_PCM16, 16000)
    assert rate(opening({}).input_audio_format) == (pb.AUDIO_ENCODING_PCM16, 16000)


def test_pcm16_without_a_rate_means_16khz_and_the_session_rate_wins() -> None:
    assert rate(opening({"input_audio_format": "pcm16"}).input_audio_format) == (
        pb.AUDIO_ENCODING_PCM16,
        16000,
    )
    # What vLLM-Omni's client sends: the encoding, and the rates beside it.
    config = opening(
        {
            "input_audio_format": "pcm16",
            "output_audio_format": "pcm16",
            "sample_rate_hz": 24000,
            "audio": {"input": {"sample_rate_hz": 24000}, "output": {"sample_rate_hz": 16000}},
        }
    )
    assert rate(config.input_audio_format) == (pb.AUDIO_ENCODING_PCM16, 24000)
    assert rate(config.output_audio_format) == (pb.AUDIO_ENCODING_PCM16, 16000)
    # A GA format object names its own rate; G.711 has a fixed one.
    ga = opening({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 48000}}}})
    assert rate(ga.input_audio_format) == (pb.AUDIO_ENCODING_PCM16, 48000)
    # G.711's rate is its own, as the OpenAI dialect reads it: the PCM default does not apply.
    ulaw = opening({"input_audio_format": "g711_ulaw"}).input_audio_format
    assert ulaw.encoding == pb.AUDIO_ENCODING_G711_ULAW
    assert rate(ulaw) == rate(audio_format("g711_ulaw", "format"))


def test_a_flat_update_is_read_as_the_reference_reads_it() -> None:
    flat = translate(
        {"type": "session.update", "event_id": "e", "instructions": "hi", "sample_rate_hz": 8000}
    )
    config = flat.update_session.config
    assert (config.instructions, flat.event_id) == ("hi", "e")
    assert rate(config.input_audio_format) == (pb.AUDIO_ENCODING_PCM16, 8000)


def test_an_update_changes_the_input_rate_only_when_it_names_one() -> None:
    untouched = translate({"type": "session.update", "session": {"instructions": "hi"}})
    assert not untouched.update_session.config.HasField("input_audio_format")
    faster = translate({"type": "session.update", "session": {"sample_rate_hz": 8000}})
    assert rate(faster.update_session.config.input_audio_format) == (pb.AUDIO_ENCODING_PCM16, 8000)


def test_extra_body_and_ref_audio_become_engine_options() -> None:
    config = opening(
        {"ref_audio": "data:audio/wav;base64,AAAA", "extra_body": {"auto_response": True, "n": 2}}
    )
    assert json_format.MessageToDict(config.engine_options) == {
        "extra_body": {"auto_response": True, "n": 2.0},
        "ref_audio": "data:audio/wav;base64,AAAA",
    }


def test_a_commit_that_does_not_say_leaves_create_response_to_turn_detection() -> None:
    unset = translate({"type": "input_audio_buffer.commit", "final": True})
    assert unset.WhichOneof("command") == "commit_input_audio"
    assert not unset.commit_input_audio.HasField("create_response")
    said = translate({"type": "input_audio_buffer.commit", "response_create": False})
    assert said.commit_input_audio.HasField("create_response")
    assert said.commit_input_audio.create_response is False
    # The reference's input.commit answers at once unless it says otherwise.
    assert translate({"type": "input.commit"}).commit_input_audio.create_response is True


def test_an_append_carries_its_frames_and_hints() -> None:
    request = translate(
        {
            "type": "input_audio_buffer.append",
            "audio": base64.b64encode(b"\0\0\0\0").decode(),
            "format": "pcm16",
            "duration_ms": 0,
            "audio_end_ms": 200,
            "is_speech": True,
            "vad": {"probability": 0.75},
            "overlap_action": "listen",
            "video_frames": [
                base64.b64encode(JPEG).decode(),
                "data:image/png;base64," + base64.b64encode(PNG).decode(),
            ],
        }
    )
    append = request.append_input_audio
    # A format named without a rate is at the session's rate (0 says so), as in the reference.
    assert (append.encoding, append.sample_rate_hz) == (pb.AUDIO_ENCODING_PCM16, 0)
    assert [(f.mime_type, f.data) for f in append.video_frames] == [
        ("image/jpeg", JPEG),
        ("image/png", PNG),
    ]
    assert json_format.MessageToDict(append.hints) == {
        "is_speech": True,
        "vad": {"speech_probability": 0.75},
        "duration_ms": 0.0,
        "overlap_action": "listen",
    }
    # The client's own rate wins over the format's default.
    with_rate = translate(
        {"type": "input_audio_buffer.append", "audio": "AAAA", "format": "pcm16",
         "sample_rate_hz": 24000}
    )  # fmt: skip
    assert with_rate.append_input_audio.sample_rate_hz == 24000


@pytest.mark.parametrize(
    "frames",
    [["AAAA"], ["not base64!"], [base64.b64encode(JPEG).decode()] * 3],
    ids=["not-an-image", "not-base64", "three"],
)
def test_bad_video_frames_are_refused(frames: list[str]) -> None:
    error = refusal({"type": "input_audio_buffer.append", "audio": "AAAA", "video_frames": frames})
    assert error.code == "invalid_video_frames"


def test_push_text_and_turn_signal_are_understood() -> None:
    pushed = translate({"type": "push_text", "text": "hello", "event_id": "e1"})
    assert pushed.append_input_text.text == "hello"
    assert pushed.event_id == "e1"
    signal = translate(
        {"type": "turn.signal", "event": "response.cancel", "payload": {"response_id": "r1"},
         "event_id": "e2"}
    )  # fmt: skip
    assert signal.cancel_response.response_id == "r1"
    assert signal.event_id == "e2"
    assert translate({"type": "signal_turn", "event": "barge_in"}).HasField("barge_in")
    unknown = refusal({"type": "turn.signal", "event": "wave_hands", "event_id": "e3"})
    assert (unknown.code, unknown.param, unknown.event_id) == ("unknown_event", "event", "e3")


def test_a_playback_ack_may_name_the_references_item_id() -> None:
    ack = translate({"type": "playback.ack", "played_ms": 500, "response_id": "resp_1",
                     "item_id": "item_resp_1"})  # fmt: skip
    assert (ack.ack_playback.response_id, ack.ack_playback.item_id) == ("resp_1", "")
    alone = translate({"type": "playback.ack", "played_ms": 500, "item_id": "item_resp_1"})
    assert (alone.ack_playback.response_id, alone.ack_playback.item_id) == ("resp_1", "")
    # Our own item ids pass as they are.
    ours = translate({"type": "playback.ack", "played_ms": 1, "item_id": "it_9"})
    assert (ours.ack_playback.response_id, ours.ack_playback.item_id) == ("", "it_9")


def test_a_malformed_resume_is_invalid_session_resume_and_ends_the_handshake() -> None:
    error = refusal({"type": "session.resume", "session_id": "s"})
    assert error.code == "invalid_session_resume"
    inbound = VllmOmniInbound()
    assert inbound.ends_handshake(error)
    assert inbound.ends_handshake(refusal("{not json"))
    assert inbound.ends_handshake(refusal("[1]"))
    assert not inbound.ends_handshake(refusal({"type": "no.such.event"}))
    # An object that is not a good event is answered in band: the reference opens on it.
    assert not inbound.ends_handshake(refusal({"type": "push_text"}))
    assert not inbound.ends_handshake(refusal({"no": "type"}))


def session(**config: Any) -> pb.Session:
    return pb.Session(
        id="sess_1",
        config=pb.SessionConfig(
            model="m",
            output_modalities=[pb.MODALITY_AUDIO, pb.MODALITY_TEXT],
            input_audio_format=pb.AudioFormat(
                encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=16000
            ),
            output_audio_format=pb.AudioFormat(
                encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=24000
            ),
            **config,
        ),
        state=pb.SESSION_STATE_ATTACHED,
        epoch=2,
    )


def created(**caps: Any) -> pb.ConverseResponse:
    return pb.ConverseResponse(
        session_created=pb.SessionCreated(
            session=session(),
            capabilities=pb.Capabilities(supports_resume=True, max_sessions=4, **caps),
            resume_token="tok",
            attachment_generation=1,
        )
    )


def test_the_session_object_carries_the_references_fields_and_capabilities() -> None:
    dialect = VllmOmniOutbound()
    config = session().config
    config.engine_options.update(
        {"ref_audio": "data:x", "extra_body": {"auto_response": True}, "responder": "echo"}
    )
    event = created(chunk_period_ms=1000)
    event.session_created.session.config.CopyFrom(config)
    (only,) = dialect.expand(event)
    assert only["type"] == "session.created"
    assert (only["resume_token"], only["attachment_generation"]) == ("tok", 1)
    assert "capabilities" not in only
    body = only["session"]
    assert body["capabilities"]["supports_session_resume"] is True
    assert body["capabilities"]["chunk_period_ms"] == 1000
    assert body["capabilities"]["supports_multi_session"] is True
    assert (body["input_audio_format"], body["sample_rate_hz"]) == ("pcm16", 16000)
    assert body["audio"]["input"]["sample_rate_hz"] == 16000
    assert body["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 16000}
    assert body["audio"]["output"]["sample_rate_hz"] == 24000
    assert body["modalities"] == ["audio", "text"]
    assert (body["state"], body["epoch"]) == ("open", 2)
    assert body["ref_audio"] == "data:x"
    assert body["extra_body"] == {"auto_response": True, "responder": "echo"}
    assert "engine_options" not in body


def test_a_session_opened_by_update_is_also_announced_by_session_updated() -> None:
    dialect = make_dialect(VLLM_OMNI, max_audio_delta_bytes=1 << 16)
    update = dialect.inbound.decode(orjson.dumps({"type": "session.update", "session": {}}))
    dialect.inbound.open_request(update, model="m")
    events = dialect.outbound.expand(created())
    assert [e["type"] for e in events] == ["session.created", "session.updated"]
    assert events[1]["session"] == events[0]["session"]
    # Opened bare (a model in the URL, or another first event): session.created alone.
    bare = make_dialect(VLLM_OMNI, max_audio_delta_bytes=1 << 16)
    bare.inbound.open_request(None, model="m")
    assert [e["type"] for e in bare.outbound.expand(created())] == ["session.created"]
    # An update later is answered with the reference's session object too.
    (later,) = dialect.outbound.expand(
        pb.ConverseResponse(seq=3, session_updated=pb.SessionUpdated(session=session()))
    )
    assert later["session"]["capabilities"]["supports_session_resume"] is True


def test_responses_name_their_id_and_audio_says_its_format_rate_and_duration() -> None:
    dialect = VllmOmniOutbound()
    dialect.expand(created())
    response = pb.Response(id="resp_1", status=pb.RESPONSE_STATUS_IN_PROGRESS)
    first = dialect.expand(
        pb.ConverseResponse(
            seq=1, response_created=pb.ResponseCreated(response=response, item_id="it_1")
        )
    )
    assert first[0]["type"] == "response.created"
    assert first[0]["response_id"] == "resp_1"
    audio = dialect.expand(
        pb.ConverseResponse(
            seq=2,
            output_audio_delta=pb.OutputAudioDelta(
                audio=b"\0\0" * 2400,
                response_id="resp_1",
                item_id="it_1",
                encoding=pb.AUDIO_ENCODING_PCM16,
                sample_rate_hz=24000,
                start_ms=1000,
                duration_ms=100,
            ),
        )
    )
    (delta,) = audio
    assert (delta["format"], delta["sample_rate_hz"]) == ("pcm16", 24000)
    assert delta["metadata"]["audio_duration_ms"] == pytest.approx(1100)
    assert delta["metadata"]["session_id"] == "sess_1"


def test_listen_and_playback_acknowledged_are_nested_as_the_reference_nests_them() -> None:
    dialect = VllmOmniOutbound()
    dialect.expand(created())
    (alone,) = dialect.expand(
        pb.ConverseResponse(seq=1, response_listen=pb.ResponseListen(reason="model_listen"))
    )
    assert "response_id" not in alone  # a decision of its own, ending no response
    assert alone["response"]["status"] == "listening"
    assert alone["response"]["metadata"]["reason"] == "model_listen"
    response = pb.Response(id="resp_2", status=pb.RESPONSE_STATUS_IN_PROGRESS)
    dialect.expand(
        pb.ConverseResponse(
            seq=2, response_created=pb.ResponseCreated(response=response, item_id="it_2")
        )
    )
    ending = dialect.expand(
        pb.ConverseResponse(
            seq=3, response_listen=pb.ResponseListen(response_id="resp_2", reason="model_listen")
        )
    )
    assert ending[0]["response_id"] == "resp_2"
    assert ending[0]["response"]["id"] == "resp_2"
    # The listen ends it, as in the reference, and its limits follow as after any response.
    assert [e["type"] for e in ending[-2:]] == ["response.done", "rate_limits.updated"]
    (ack,) = dialect.expand(
        pb.ConverseResponse(
            seq=4,
            playback_acknowledged=pb.PlaybackAcknowledged(
                response_id="resp_2", item_id="it_2", played_ms=250, committed_ms=250
            ),
        )
    )
    assert ack["event"]["type"] == "playback.acknowledged"
    assert (ack["event"]["response_id"], ack["event"]["played_ms"]) == ("resp_2", 250)
    assert "played_ms" not in ack


def test_items_are_announced_in_both_spellings_each_numbered() -> None:
    dialect = vllm_omni_dialect(max_audio_delta_bytes=1 << 16)
    dialect.outbound.expand(created())
    item = pb.ConversationItem(id="it_u", role=pb.ITEM_ROLE_USER)
    events = dialect.expand(pb.ConverseResponse(seq=7, item_added=pb.ItemAdded(item=item)))
    assert [e["type"] for e in events] == ["conversation.item.added", "conversation.item.created"]
    assert events[0]["item"] == events[1]["item"]
    assert events[0]["server_event_seq"] < events[1]["server_event_seq"]
    # Only the group's last covers contract event 7: a client that saw it saw both.
    ack = {"type": "session.event_ack", "server_event_seq": events[1]["server_event_seq"]}
    assert dialect.request(orjson.dumps(ack)).ack_events.seq == 7
    assert events[0]["event_id"] != events[1]["event_id"]


def test_response_done_is_followed_by_rate_limits_and_expiry_has_the_references_reasons() -> None:
    dialect = VllmOmniOutbound()
    dialect.expand(created())
    done = dialect.expand(
        pb.ConverseResponse(
            seq=5,
            response_done=pb.ResponseDone(
                response=pb.Response(id="r", status=pb.RESPONSE_STATUS_COMPLETED)
            ),
        )
    )
    assert [e["type"] for e in done[-2:]] == ["response.done", "rate_limits.updated"]
    assert done[-1]["rate_limits"] == []
    assert done[-2]["response_id"] == "r"
    for reason, shown in (
        ("barge_in", "barge_in"),
        ("output_audio_cleared", "output_audio_buffer_clear"),
    ):
        cut = pb.Response(id="r2", status=pb.RESPONSE_STATUS_CANCELLED, status_reason=reason)
        ended = dialect.expand(pb.ConverseResponse(response_done=pb.ResponseDone(response=cut)))
        assert ended[-2]["response"]["status_details"]["reason"] == shown
    (expired,) = dialect.expand(
        pb.ConverseResponse(
            session_expired=pb.SessionExpired(
                session_id="sess_1", reason=pb.EXPIRY_REASON_ENGINE_FAILURE
            )
        )
    )
    assert expired["reason"] == "request_cleanup"


def test_an_append_may_name_its_format_input_audio_format() -> None:
    append = translate(
        {"type": "input_audio_buffer.append", "audio": "AAAA", "input_audio_format": "pcm_f32le"}
    ).append_input_audio
    assert (append.encoding, append.sample_rate_hz) == (pb.AUDIO_ENCODING_PCM_F32, 0)


def test_an_ack_naming_the_engines_own_item_id_is_passed_as_it_is() -> None:
    dialect = make_dialect(VLLM_OMNI, max_audio_delta_bytes=1 << 16)
    response = pb.Response(id="resp_1", status=pb.RESPONSE_STATUS_IN_PROGRESS)
    dialect.outbound.expand(
        pb.ConverseResponse(
            seq=1, response_created=pb.ResponseCreated(response=response, item_id="item_abc")
        )
    )

    def ack(**fields: Any) -> pb.AckPlayback:
        event = dialect.inbound.decode(orjson.dumps({"type": "playback.ack", **fields}))
        return dialect.inbound.to_request(event).ack_playback

    # The engine's own id, announced on this connection: not the reference's form.
    own = ack(played_ms=1, item_id="item_abc")
    assert (own.response_id, own.item_id) == ("", "item_abc")
    # The reference's form for the same response.
    theirs = ack(played_ms=1, item_id="item_resp_1")
    assert (theirs.response_id, theirs.item_id) == ("resp_1", "")


def turn_events() -> list[pb.ConverseResponse]:
    """A turn as the service journals it: the user's item, a response with audio, its end."""
    user = pb.ConversationItem(id="it_u", role=pb.ITEM_ROLE_USER)
    response = pb.Response(id="resp_1", status=pb.RESPONSE_STATUS_IN_PROGRESS)
    delta = pb.OutputAudioDelta(
        audio=b"\0\0" * 1200, response_id="resp_1", item_id="it_1", sample_rate_hz=24000
    )
    done = pb.Response(id="resp_1", status=pb.RESPONSE_STATUS_COMPLETED)
    return [
        pb.ConverseResponse(seq=5, item_added=pb.ItemAdded(item=user)),
        pb.ConverseResponse(
            seq=6, response_created=pb.ResponseCreated(response=response, item_id="it_1")
        ),
        pb.ConverseResponse(seq=7, output_audio_delta=delta),
        pb.ConverseResponse(seq=8, response_done=pb.ResponseDone(response=done)),
    ]


def test_every_journaled_event_has_a_number_of_its_own_as_the_reference_gives() -> None:
    # vLLM-Omni's client drops an event whose server_event_seq is not above the last it saw,
    # and acks each one it keeps: the reference numbers every journaled event, so every event
    # the bridge renders from one (conversation.item.created beside .added, the events of a
    # response's start and end, rate_limits.updated) needs a number of its own, rising.
    dialect = vllm_omni_dialect(max_audio_delta_bytes=1000)  # the delta goes out in three
    update = dialect.inbound.decode(orjson.dumps({"type": "session.update", "session": {}}))
    dialect.inbound.open_request(update, model="m")
    created_event, opening_update = dialect.outbound.expand(created())
    assert "server_event_seq" not in created_event  # outside the journal, as in the reference
    events = [opening_update, *(e for each in turn_events() for e in dialect.outbound.expand(each))]
    unnumbered = [e["type"] for e in events if not isinstance(e.get("server_event_seq"), int)]
    assert not unnumbered
    seqs = [e["server_event_seq"] for e in events]
    assert seqs == sorted(set(seqs)) and seqs[0] > 0
    assert len(events) > len(turn_events()) + 1  # groups of several events, each numbered


def test_an_ack_or_a_resume_cursor_inside_a_group_covers_only_the_events_before_it() -> None:
    # A client that saw part of a contract event's group has not seen that contract event: an
    # ack of it acknowledges the one before, and a resume from it replays the whole group (the
    # client drops what it already saw by its number).
    dialect = vllm_omni_dialect(max_audio_delta_bytes=1 << 16)
    dialect.outbound.expand(created())
    groups = [dialect.outbound.expand(event) for event in turn_events()]
    started = groups[1]  # contract event 6: response.created and the events announcing it
    assert len(started) > 1
    first, last = started[0]["server_event_seq"], started[-1]["server_event_seq"]

    def acked(seq: int) -> int:
        ack = {"type": "session.event_ack", "server_event_seq": seq}
        return dialect.inbound.to_request(dialect.inbound.decode(orjson.dumps(ack))).ack_events.seq

    def resumed_after(seq: int) -> int:
        resume = {
            "type": "session.resume",
            "session_id": "sess_1",
            "resume_token": "tok",
            "last_received_server_event_seq": seq,
        }
        event = dialect.inbound.decode(orjson.dumps(resume))
        return dialect.inbound.resume_request(event).resume_session.last_received_seq

    assert (acked(last), acked(first)) == (6, 5)
    assert (resumed_after(last), resumed_after(first), resumed_after(0)) == (6, 5, 0)
    assert acked(groups[-1][-1]["server_event_seq"]) == 8


def test_the_capabilities_say_a_chunk_period_the_reference_client_can_read() -> None:
    # vLLM-Omni's client reads session.capabilities.chunk_period_ms as a positive whole number
    # of milliseconds and takes anything else (null among them) for 1000: an engine that takes
    # input of any length must say a unit every length is a whole number of, 1 ms.
    def period(**caps: Any) -> object:
        (only,) = VllmOmniOutbound().expand(created(**caps))
        return only["session"]["capabilities"]["chunk_period_ms"]

    assert period(chunk_period_ms=1000) == 1000
    assert period() == 1  # the contract's 0: input of any length
