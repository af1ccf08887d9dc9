"""A replay through the bridge opens and updates its session with the recorded truncation, in
GA's shape, so the engine reads what it read."""

from __future__ import annotations

from omni_grpc.client.replay.ws_driver import client_event, session_patch
from omni_grpc.wire import pb


def test_the_recorded_truncation_goes_out_in_ga_s_shape() -> None:
    ratio = pb.Truncation(
        type=pb.TRUNCATION_TYPE_RETENTION_RATIO,
        retention_ratio=0.5,
        post_instructions_token_limit=9,
    )
    opened = session_patch(pb.SessionConfig(truncation=ratio), 16000)
    assert opened["truncation"] == {
        "type": "retention_ratio",
        "retention_ratio": 0.5,
        "token_limits": {"post_instructions": 9},
    }
    assert "truncation" not in session_patch(pb.SessionConfig(), 16000)
    update = pb.UpdateSession(
        config=pb.SessionConfig(truncation=pb.Truncation(type=pb.TRUNCATION_TYPE_DISABLED))
    )
    event = client_event(pb.ConverseRequest(update_session=update))
    assert event is not None and event["session"]["truncation"] == "disabled"
