"""Golden tests of turn-taking in the OpenAI dialect: the contract's turn detection, idle prompt
and overlap decisions as a stock client and an extension client see them, each frame checked
against OpenAI's types (or, for the extensions, against their schema)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from bridge.realtime.outbound import RealtimeOutbound
from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import EngineFeatures, Limits
from omni_grpc.wire import pb
from tests.bridge.testkit import check_server_event

# An engine that judges words: semantic_vad is served as such.
JUDGES_WORDS = EngineFeatures(
    name="judge",
    supports_server_vad=True,
    supports_semantic_vad=True,
    supports_interruption_by_words=True,
)
RID, IID, USER_ITEM = "resp_1", "item_r1", "item_u2"


def rendered(extensions: bool, *events: pb.ConverseResponse) -> list[dict[str, Any]]:
    dialect = RealtimeOutbound(extensions=extensions)
    out = []
    for event in events:
        for item in dialect.expand(event):
            item = orjson.loads(orjson.dumps(item))  # what goes on the wire is JSON
            check_server_event(item, extensions=extensions)
            out.append(item)
    return out


def updated(detection: pb.TurnDetection) -> pb.ConverseResponse:
    config = resolve_config(
        pb.SessionConfig(model="m", turn_detection=detection), Limits(), JUDGES_WORDS
    )
    return pb.ConverseResponse(
        seq=1, session_updated=pb.SessionUpdated(session=pb.Session(id="sess_1", config=config))
    )


@pytest.mark.parametrize("extensions", [False, True])
def test_semantic_vad_is_shown_with_its_eagerness(extensions: bool) -> None:
    semantic = pb.TurnDetection(
        type=pb.TURN_DETECTION_TYPE_SEMANTIC_VAD, eagerness=pb.EAGERNESS_HIGH, idle_timeout_ms=6000
    )
    (event,) = rendered(extensions, updated(semantic))
    shown = event["session"]["audio"]["input"]["turn_detection"]
    expected = {
        "type": "semantic_vad",
        "eagerness": "high",
        "create_response": True,
        "interrupt_response": True,
    }
    # GA's semantic_vad has no idle timeout: only an extension client is shown it.
    assert shown == ({**expected, "idle_timeout_ms": 6000} if extensions else expected)


def test_server_vads_idle_timeout_is_ga_and_shown_to_every_client() -> None:
    server_vad = pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SERVER_VAD, idle_timeout_ms=6000)
    (event,) = rendered(False, updated(server_vad))
    assert event["session"]["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == 6000
    (off,) = rendered(False, updated(pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SERVER_VAD)))
    assert off["session"]["audio"]["input"]["turn_detection"]["idle_timeout_ms"] is None


def test_the_interruption_rules_are_an_extension_of_the_session() -> None:
    rules = pb.SessionConfig(
        model="m",
        interruption=pb.InterruptionConfig(
            mode=pb.INTERRUPTION_MODE_WORDS, resume_false_interruption=True
        ),
    )
    config = resolve_config(rules, Limits(), JUDGES_WORDS)
    event = pb.ConverseResponse(
        session_updated=pb.SessionUpdated(session=pb.Session(id="sess_1", config=config))
    )
    (plain,) = rendered(False, event)
    (extended,) = rendered(True, event)
    assert "interruption" not in plain["session"]
    assert extended["session"]["interruption"] == {
        "mode": "words",
        "min_duration_ms": 0,
        "min_words": 1,
        "resume_false_interruption": True,
        "false_interruption_timeout_ms": 2000,
    }


@pytest.mark.parametrize("extensions", [False, True])
def test_the_idle_prompt_is_gas_timeout_triggered(extensions: bool) -> None:
    idle = pb.IdleTimeoutTriggered(audio_start_ms=1200.4, audio_end_ms=7200.6, item_id=USER_ITEM)
    (event,) = rendered(extensions, pb.ConverseResponse(seq=4, idle_timeout_triggered=idle))
    assert event["type"] == "input_audio_buffer.timeout_triggered"
    assert (event["audio_start_ms"], event["audio_end_ms"], event["item_id"]) == (
        1200,
        7201,
        USER_ITEM,
    )


def turn_end(
    probability: float, sound: float | None = None, words: float | None = None
) -> pb.ConverseResponse:
    return pb.ConverseResponse(
        seq=2,
        turn_end_decision=pb.TurnEndDecision(
            item_id=USER_ITEM,
            audio_end_ms=2300.2,
            probability=probability,
            wait_ms=1800,
            eagerness=pb.EAGERNESS_AUTO,
            transcript="I want to fly to",
            decided_ms=85.5,
            sound_probability=sound,
            words_probability=words,
        ),
    )


def test_a_turn_end_decision_reaches_extension_clients_only() -> None:
    assert rendered(False, turn_end(0.12)) == []
    judged, unjudged = rendered(True, turn_end(0.12, 0.2, 0.04), turn_end(-1))
    assert {key: judged[key] for key in judged if key not in ("event_id", "server_event_seq")} == {
        "type": "turn_end.decision",
        "item_id": USER_ITEM,
        "audio_end_ms": 2300,
        "probability": 0.12,
        "wait_ms": 1800,
        "eagerness": "auto",
        "transcript": "I want to fly to",
        "decided_ms": 85.5,
        "sound_probability": 0.2,
        "words_probability": 0.04,
    }
    assert unjudged["probability"] is None  # no words were judged in time
    assert (unjudged["sound_probability"], unjudged["words_probability"]) == (None, None)


def overlap(action: pb.OverlapAction.ValueType, reason: str, audio_ms: float) -> pb.OverlapDecision:
    return pb.OverlapDecision(
        policy=pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH,
        action=action,
        reason=reason,
        response_id=RID,
        item_id=IID,
        audio_ms=audio_ms,
        overlap_ms=340.0,
        transcript="yeah" if action != pb.OVERLAP_ACTION_PAUSE else "",
        input_item_id=USER_ITEM,
    )


def test_a_reply_paused_resumed_and_cut_reaches_extension_clients_only() -> None:
    decisions = [
        pb.ConverseResponse(
            seq=5, overlap_decision=overlap(pb.OVERLAP_ACTION_PAUSE, "overlap", 900)
        ),
        pb.ConverseResponse(
            seq=6, overlap_decision=overlap(pb.OVERLAP_ACTION_RESUME, "backchannel", 750)
        ),
        pb.ConverseResponse(
            seq=7, overlap_decision=overlap(pb.OVERLAP_ACTION_BARGE_IN, "min_words", 1500)
        ),
    ]
    assert rendered(False, *decisions) == []
    paused, resumed, cut = rendered(True, *decisions)
    assert [e["action"] for e in (paused, resumed, cut)] == ["pause", "resume", "barge_in"]
    assert (resumed["reason"], resumed["audio_ms"], resumed["transcript"]) == (
        "backchannel",
        750.0,
        "yeah",
    )
    assert (cut["response_id"], cut["item_id"], cut["input_item_id"]) == (RID, IID, USER_ITEM)
    assert paused["overlap_ms"] == 340.0 and paused["transcript"] == ""
