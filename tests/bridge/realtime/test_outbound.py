"""Golden tests of the outbound dialect: contract events → OpenAI's Realtime server events."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from google.protobuf.duration_pb2 import Duration

from bridge.realtime.outbound import RealtimeOutbound
from bridge.realtime.server_events import error_json
from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import EngineFeatures, Limits, capabilities
from omni_grpc.wire import pb

Check = Callable[[dict[str, Any]], None]
ENGINE = EngineFeatures(name="loopback")
RID, IID = "resp_1", "item_r1"


def session(config: pb.SessionConfig | None = None) -> pb.Session:
    resolved = resolve_config(config or pb.SessionConfig(model="m"), Limits(), ENGINE)
    return pb.Session(
        id="sess_1", config=resolved, state=pb.SESSION_STATE_ATTACHED, turn_state=pb.TURN_STATE_IDLE
    )


def created() -> pb.ConverseResponse:
    return pb.ConverseResponse(
        session_created=pb.SessionCreated(
            session=session(),
            capabilities=capabilities(Limits(), ENGINE),
            resume_token="tok",
            attachment_generation=1,
        )
    )


def response_events(
    *, pcm: bytes = b"\x01\x02" * 240, done_with_output: bool = True
) -> list[pb.ConverseResponse]:
    """One whole audio response as the contract carries it, seq 1 to 5."""
    running = pb.Response(
        id=RID,
        status=pb.RESPONSE_STATUS_IN_PROGRESS,
        output_modalities=[pb.MODALITY_AUDIO],
        metadata={"ticket": "7"},
    )
    final = pb.Response(
        id=RID,
        status=pb.RESPONSE_STATUS_COMPLETED,
        status_reason="stop",
        output_modalities=[pb.MODALITY_AUDIO],
        metadata={"ticket": "7"},
        usage=pb.Usage(input_tokens=3, output_tokens=4, output_audio_ms=10.0),
        latency=pb.TurnLatency(first_audio_ms=12.5, total_ms=40.0),
    )
    if done_with_output:
        final.output.append(
            pb.ConversationItem(
                id=IID,
                role=pb.ITEM_ROLE_ASSISTANT,
                status=pb.ITEM_STATUS_COMPLETED,
                content=[
                    pb.ContentPart(
                        type=pb.CONTENT_TYPE_OUTPUT_AUDIO,
                        transcript="Hi there",
                        audio_duration_ms=10.0,
                    )
                ],
            )
        )
    return [
        pb.ConverseResponse(
            seq=1, response_created=pb.ResponseCreated(response=running, item_id=IID)
        ),
        pb.ConverseResponse(
            seq=2,
            output_audio_delta=pb.OutputAudioDelta(
                audio=pcm,
                response_id=RID,
                item_id=IID,
                encoding=pb.AUDIO_ENCODING_PCM16,
                sample_rate_hz=24000,
                start_ms=0.0,
                duration_ms=len(pcm) / 48.0,
            ),
        ),
        pb.ConverseResponse(
            seq=3,
            output_audio_transcript_delta=pb.OutputAudioTranscriptDelta(
                delta="Hi ", response_id=RID, item_id=IID
            ),
        ),
        pb.ConverseResponse(
            seq=4,
            output_audio_transcript_delta=pb.OutputAudioTranscriptDelta(
                delta="there", response_id=RID, item_id=IID
            ),
        ),
        pb.ConverseResponse(
            seq=5,
            response_done=pb.ResponseDone(
                response=final,
                rate_limits=[
                    pb.RateLimit(
                        name="commands",
                        limit=5000,
                        remaining=4990,
                        reset=Duration(nanos=20_000_000),
                    ),
                    pb.RateLimit(name="audio", limit=100, remaining=0, reset=Duration(seconds=2)),
                ],
            ),
        ),
    ]


def expand_all(
    dialect: RealtimeOutbound, events: list[pb.ConverseResponse], check: Check
) -> list[dict[str, Any]]:
    out = []
    for event in events:
        for item in dialect.expand(event):
            # What goes on the wire is JSON: validate the JSON, not the Python objects.
            item = orjson.loads(orjson.dumps(item))
            check(item)
            out.append(item)
    return out


def test_a_response_expands_into_openais_full_sequence(check_event: Check) -> None:
    dialect = RealtimeOutbound(extensions=True)
    dialect.expand(created())
    events = expand_all(dialect, response_events(), check_event)
    assert [e["type"] for e in events] == [
        "response.created",
        "conversation.item.added",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
        "response.output_audio_transcript.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
    ]
    # The last event of each journaled event's group carries its seq, the others none; the
    # limits that follow response.done come after it.
    assert [e.get("server_event_seq") for e in events] == [
        None,
        None,
        None,
        1,
        2,
        3,
        4,
        None,
        None,
        None,
        None,
        None,
        5,
        None,
    ]
    by_type = {e["type"]: e for e in events}
    assert by_type["response.content_part.added"]["part"] == {"type": "audio", "transcript": ""}
    assert by_type["response.output_audio_transcript.done"]["transcript"] == "Hi there"
    assert by_type["response.output_item.done"]["item"] == {
        "id": IID,
        "object": "realtime.item",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_audio", "transcript": "Hi there"}],
    }
    done = by_type["response.done"]["response"]
    assert done["status"] == "completed" and done["status_details"] is None
    # response.create's metadata comes back on the response, as OpenAI returns it.
    assert by_type["response.created"]["response"]["metadata"] == {"ticket": "7"}
    assert done["metadata"] == {"ticket": "7"}
    assert done["usage"]["total_tokens"] == 7
    assert done["latency"]["first_audio_ms"] == 12.5
    assert base64.b64decode(by_type["response.output_audio.delta"]["delta"]) == b"\x01\x02" * 240
    # The limits the service read as the response ended, in OpenAI's names (audio is "tokens").
    assert by_type["rate_limits.updated"]["rate_limits"] == [
        {"name": "requests", "limit": 5000, "remaining": 4990, "reset_seconds": 0.02},
        {"name": "tokens", "limit": 100, "remaining": 0, "reset_seconds": 2.0},
    ]


def test_event_ids_are_deterministic_so_a_replay_carries_the_same_ids(check_event: Check) -> None:
    first, second = RealtimeOutbound(extensions=True), RealtimeOutbound(extensions=True)
    first.expand(created())
    second.expand(created())
    original = expand_all(first, response_events(), check_event)
    replayed = expand_all(second, response_events(), check_event)
    assert original == replayed
    ids = [e["event_id"] for e in original]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("event_") for i in ids)


def test_a_fresh_bridge_renders_the_rest_of_a_response_it_never_saw_start(
    check_event: Check,
) -> None:
    full, fresh = RealtimeOutbound(extensions=True), RealtimeOutbound(extensions=True)
    full.expand(created())
    fresh.expand(created())
    events = response_events()
    whole = expand_all(full, events, check_event)
    tail = expand_all(fresh, events[2:], check_event)
    # Identical to what a bridge that saw everything sent after seq 2.
    assert tail == whole[5:]


def test_without_output_in_response_done_the_transcript_is_accumulated(check_event: Check) -> None:
    dialect = RealtimeOutbound(extensions=True)
    dialect.expand(created())
    events = expand_all(dialect, response_events(done_with_output=False), check_event)
    done = {e["type"]: e for e in events}
    assert done["response.output_audio_transcript.done"]["transcript"] == "Hi there"
    assert done["response.done"]["response"]["output"][0]["content"] == [
        {"type": "output_audio", "transcript": "Hi there"}
    ]


def test_big_audio_is_split_into_small_contiguous_deltas(check_event: Check) -> None:
    pcm = bytes(range(256)) * 1000  # 256 000 bytes, 5.33 s at 24 kHz
    dialect = RealtimeOutbound(extensions=True)
    dialect.expand(created())
    events = expand_all(dialect, response_events(pcm=pcm)[:2], check_event)
    deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
    assert len(deltas) == 3
    assert all(len(orjson.dumps(d)) < 200_000 for d in deltas)
    assert b"".join(base64.b64decode(d["delta"]) for d in deltas) == pcm
    assert [d.get("server_event_seq") for d in deltas] == [None, None, 2]
    ends = [d["start_ms"] + d["duration_ms"] for d in deltas]
    assert [d["start_ms"] for d in deltas[1:]] == pytest.approx(ends[:-1])
    assert ends[-1] == pytest.approx(len(pcm) / 48.0)


def test_split_points_keep_whole_samples() -> None:
    dialect = RealtimeOutbound(max_audio_delta_bytes=1001, extensions=True)
    deltas = dialect.expand(response_events(pcm=b"\x00" * 4000)[1])
    assert [len(base64.b64decode(d["delta"])) for d in deltas] == [1000, 1000, 1000, 1000]


def test_cancelled_and_failed_responses_carry_openai_status_details(check_event: Check) -> None:
    dialect = RealtimeOutbound(extensions=True)
    dialect.expand(created())
    expand_all(dialect, response_events()[:1], check_event)
    cancelled = pb.Response(id=RID, status=pb.RESPONSE_STATUS_CANCELLED, status_reason="barge_in")
    done = expand_all(
        dialect,
        [pb.ConverseResponse(seq=2, response_done=pb.ResponseDone(response=cancelled))],
        check_event,
    )[-2]["response"]
    assert done["status_details"] == {
        "type": "cancelled",
        "reason": "turn_detected",
        "detail": "barge_in",
    }
    assert done["output"][0]["status"] == "incomplete"
    failed = pb.Response(
        id="resp_2", status=pb.RESPONSE_STATUS_FAILED, status_reason="engine_error"
    )
    done = expand_all(
        dialect,
        [pb.ConverseResponse(seq=3, response_done=pb.ResponseDone(response=failed))],
        check_event,
    )[-2]["response"]
    assert done["status_details"] == {
        "type": "failed",
        "detail": "engine_error",
        "error": {"type": "server_error", "code": "engine_error"},
    }


def test_a_listen_that_ends_an_announced_response_closes_it(check_event: Check) -> None:
    dialect = RealtimeOutbound(extensions=True)
    dialect.expand(created())
    expand_all(dialect, response_events()[:1], check_event)
    limits = pb.RateLimit(name="commands", limit=10, remaining=9, reset=Duration(nanos=100_000_000))
    listen = pb.ConverseResponse(
        seq=2,
        response_listen=pb.ResponseListen(
            response_id=RID, reason="model_listen", rate_limits=[limits]
        ),
    )
    events = expand_all(dialect, [listen], check_event)
    assert events[0] == {
        "type": "response.listen",
        "response_id": RID,
        "reason": "model_listen",
        "event_id": events[0]["event_id"],
    }
    done, updated = events[-2:]
    assert done["type"] == "response.done" and done["server_event_seq"] == 2
    assert done["response"]["status_details"]["detail"] == "model_listen"
    # As after any response.done: the limits the service read as the listen ended it.
    assert updated["rate_limits"] == [
        {"name": "requests", "limit": 10, "remaining": 9, "reset_seconds": 0.1}
    ]
    bare = pb.ConverseResponse(seq=3, response_listen=pb.ResponseListen(reason="overlap"))
    assert [e["type"] for e in expand_all(dialect, [bare], check_event)] == ["response.listen"]


def test_user_items_pass_and_announced_assistant_items_are_not_repeated(check_event: Check) -> None:
    dialect = RealtimeOutbound(extensions=True)
    dialect.expand(created())
    user = pb.ConversationItem(
        id="item_u1",
        role=pb.ITEM_ROLE_USER,
        status=pb.ITEM_STATUS_COMPLETED,
        content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_AUDIO)],
    )
    events = expand_all(
        dialect,
        [
            pb.ConverseResponse(
                seq=1,
                input_committed=pb.InputCommitted(item_id="item_u1", audio_duration_ms=1500.0),
            ),
            pb.ConverseResponse(seq=2, item_added=pb.ItemAdded(item=user)),
            pb.ConverseResponse(
                seq=3,
                input_transcription=pb.InputTranscription(item_id="item_u1", transcript="hello"),
            ),
            pb.ConverseResponse(seq=4, item_done=pb.ItemDone(item=user)),
        ],
        check_event,
    )
    assert [e["type"] for e in events] == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.done",
    ]
    assert events[1]["item"]["content"] == [{"type": "input_audio", "transcript": None}]
    assert events[2]["usage"] == {"type": "duration", "seconds": 1.5}
    expand_all(dialect, response_events()[:1], check_event)
    assistant = pb.ConversationItem(id=IID, role=pb.ITEM_ROLE_ASSISTANT)
    assert dialect.expand(pb.ConverseResponse(seq=6, item_added=pb.ItemAdded(item=assistant))) == []


def test_session_events(check_event: Check) -> None:
    dialect = RealtimeOutbound(extensions=True)
    first = expand_all(dialect, [created()], check_event)[0]
    assert first["type"] == "session.created" and "server_event_seq" not in first
    assert first["resume_token"] == "tok" and first["attachment_generation"] == 1
    assert first["session"]["id"] == "sess_1" and first["session"]["model"] == "m"
    assert first["session"]["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert first["capabilities"]["journal_window_ms"] == 60_000
    assert dialect.session_id == "sess_1"
    updated = pb.ConverseResponse(
        seq=1,
        session_updated=pb.SessionUpdated(
            session=session(
                pb.SessionConfig(
                    model="m",
                    instructions="x",
                    voice="v",
                    input_transcription=pb.InputTranscriptionConfig(enabled=True),
                )
            )
        ),
    )
    body = expand_all(dialect, [updated], check_event)[0]["session"]
    assert (body["instructions"], body["audio"]["output"]["voice"]) == ("x", "v")
    assert body["audio"]["input"]["transcription"] == {
        "model": None,
        "language": None,
        "prompt": None,
    }


def test_extension_events_match_their_schema(check_event: Check) -> None:
    dialect = RealtimeOutbound(extensions=True)
    time_left = pb.GoingAway(reason="shutdown")
    time_left.time_left.FromMilliseconds(5000)
    events = [
        pb.ConverseResponse(
            session_resumed=pb.SessionResumed(
                session=session(), resume_token="t2", attachment_generation=2, replayed_events=3
            )
        ),
        pb.ConverseResponse(
            session_replaced=pb.SessionReplaced(session_id="sess_1", attachment_generation=1)
        ),
        pb.ConverseResponse(
            resync_required=pb.ResyncRequired(
                session_id="sess_1", reason=pb.RESYNC_REASON_JOURNAL_OVERFLOW
            )
        ),
        pb.ConverseResponse(
            seq=9,
            session_expired=pb.SessionExpired(
                session_id="sess_1", reason=pb.EXPIRY_REASON_DISCONNECT_GRACE
            ),
        ),
        pb.ConverseResponse(
            seq=10, session_closed=pb.SessionClosed(session_id="sess_1", reason="client_close")
        ),
        pb.ConverseResponse(seq=11, heartbeat_ack=pb.HeartbeatAck(session_id="sess_1")),
        pb.ConverseResponse(going_away=time_left),
        pb.ConverseResponse(seq=12, response_speak=pb.ResponseSpeak(response_id=RID, item_id=IID)),
        pb.ConverseResponse(
            seq=13,
            playback_acknowledged=pb.PlaybackAcknowledged(
                response_id=RID, item_id=IID, played_ms=500, committed_ms=400, truncate=True
            ),
        ),
        pb.ConverseResponse(
            seq=14,
            overlap_decision=pb.OverlapDecision(
                policy=pb.OVERLAP_POLICY_LISTEN_ONLY,
                action=pb.OVERLAP_ACTION_LISTEN,
                reason="short",
            ),
        ),
        pb.ConverseResponse(seq=15, output_audio_cleared=pb.OutputAudioCleared(response_id=RID)),
    ]
    out = expand_all(dialect, events, check_event)
    assert [e["type"] for e in out] == [
        "session.resumed",
        "session.replaced",
        "session.resync_required",
        "session.expired",
        "session.closed",
        "session.heartbeat_ack",
        "session.going_away",
        "response.speak",
        "playback.acknowledged",
        "overlap.decision",
        "output_audio_buffer.cleared",
    ]
    assert out[0]["resume_token"] == "t2" and out[0]["session"]["id"] == "sess_1"
    assert out[2]["reason"] == "journal_overflow"
    assert out[3]["reason"] == "disconnect_grace_expired" and out[3]["server_event_seq"] == 9
    assert out[6]["time_left_ms"] == 5000


def test_errors_use_openais_nested_shape(check_event: Check) -> None:
    dialect = RealtimeOutbound(extensions=True)
    dialect.expand(created())
    retry = pb.ErrorReport(
        code="input_backpressure",
        type=pb.ERROR_TYPE_RATE_LIMIT,
        message="slow",
        client_seq=4,
        event_id="c4",
        retryable=True,
    )
    retry.retry_after.FromMilliseconds(250)
    event = expand_all(dialect, [pb.ConverseResponse(seq=7, error=retry)], check_event)[0]
    assert event["error"] == {
        "type": "rate_limit_error",
        "code": "input_backpressure",
        "message": "slow; try again in 250 ms",  # the hint in words, for the plain dialect
        "param": None,
        "event_id": "c4",
        "retryable": True,
        "retry_after_ms": 250,
    }
    local = error_json("bad_audio", "not base64", param="audio", event_id="c5")
    check_event(local)
    assert local["error"] == {
        "type": "invalid_request_error",
        "code": "bad_audio",
        "message": "not base64",
        "param": "audio",
        "event_id": "c5",
    }


def test_unjournaled_events_get_fresh_random_ids() -> None:
    dialect = RealtimeOutbound(extensions=True)
    first, second = dialect.expand(created())[0], dialect.expand(created())[0]
    assert first["event_id"] != second["event_id"]
    assert dialect.expand(pb.ConverseResponse()) == []
