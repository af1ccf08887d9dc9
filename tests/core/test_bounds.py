"""The contract's bounds on what a gRPC client builds itself: Structs, metadata, Durations.

The bridge holds JSON to these bounds before it builds a command; a gRPC client can send any
message the decoder takes, so the core checks the same bounds again and answers in band.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import duration_pb2, struct_pb2

from omni_grpc.core import CommandError
from omni_grpc.core.config import resolve_config
from omni_grpc.core.validation import check_command, check_duration, check_metadata, check_struct
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import (
    MAX_DURATION_NANOS,
    MAX_DURATION_S,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_CHARS,
    MAX_STRUCT_DEPTH,
    MAX_STRUCT_VALUES,
)

from .helpers import ENGINE, LIMITS, cmd, decode, heartbeat, open_session


def nested(depth: int, *, through_lists: bool = False) -> dict[str, Any]:
    """A JSON object ``depth`` levels deep (the top object is level 1)."""
    value: Any = 1
    for level in range(depth - 1):
        value = [value] if through_lists and level % 2 == 0 else {"a": value}
    return {"a": value}


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


@pytest.mark.parametrize("through_lists", [False, True], ids=["objects", "lists"])
def test_a_struct_at_the_depth_bound_passes_and_one_deeper_is_refused(through_lists: bool) -> None:
    check_struct(struct(nested(MAX_STRUCT_DEPTH, through_lists=through_lists)), "metadata")
    with pytest.raises(CommandError) as refused:
        check_struct(struct(nested(MAX_STRUCT_DEPTH + 1, through_lists=through_lists)), "metadata")
    assert (refused.value.code, refused.value.param) == ("bad_event", "metadata")


def test_a_struct_at_the_size_bound_passes_and_one_value_more_is_refused() -> None:
    flat = {f"k{index}": index for index in range(MAX_STRUCT_VALUES)}
    check_struct(struct(flat), "engine_options")
    # The values are counted at every level: one more anywhere is one too many.
    with pytest.raises(CommandError) as refused:
        check_struct(struct({**flat, "k0": {"x": 1}}), "engine_options")
    assert (refused.value.code, refused.value.param) == ("bad_event", "engine_options")


def duration(seconds: int, nanos: int = 0) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds, nanos=nanos)


@pytest.mark.parametrize(
    "value",
    [
        duration(0),
        duration(MAX_DURATION_S, MAX_DURATION_NANOS),
        duration(-MAX_DURATION_S, -MAX_DURATION_NANOS),
        duration(5, 1),
        duration(-5, -1),
        duration(0, -1),
    ],
)
def test_durations_within_their_span_pass(value: duration_pb2.Duration) -> None:
    check_duration(value, "idle_timeout")


@pytest.mark.parametrize(
    "value",
    [
        duration(MAX_DURATION_S + 1),
        duration(-MAX_DURATION_S - 1),
        duration(2**63 - 1),
        duration(0, MAX_DURATION_NANOS + 1),
        duration(0, -MAX_DURATION_NANOS - 1),
        duration(5, -1),
        duration(-5, 1),
    ],
)
def test_durations_out_of_their_span_are_refused(value: duration_pb2.Duration) -> None:
    with pytest.raises(CommandError) as refused:
        check_duration(value, "idle_timeout")
    assert (refused.value.code, refused.value.param) == ("invalid_session_config", "idle_timeout")


@pytest.mark.parametrize(
    ("config", "param"),
    [
        (pb.SessionConfig(idle_timeout=duration(2**62)), "idle_timeout"),
        (pb.SessionConfig(engine_options=struct(nested(MAX_STRUCT_DEPTH + 1))), "engine_options"),
    ],
    ids=["idle_timeout", "engine_options"],
)
def test_a_configuration_out_of_bounds_is_refused(config: pb.SessionConfig, param: str) -> None:
    with pytest.raises(CommandError) as refused:
        resolve_config(config, LIMITS, ENGINE)
    assert refused.value.param == param


def test_metadata_at_its_bounds_passes() -> None:
    full = {
        f"{index:0{MAX_METADATA_KEY_CHARS}d}": "v" * MAX_METADATA_VALUE_CHARS
        for index in range(MAX_METADATA_PAIRS)
    }
    check_metadata(full, "metadata")
    check_command(
        cmd(1, create_response=pb.CreateResponse(metadata=full)), "create_response", LIMITS, ENGINE
    )


@pytest.mark.parametrize(
    "metadata",
    [
        {f"k{index}": "v" for index in range(MAX_METADATA_PAIRS + 1)},
        {"k" * (MAX_METADATA_KEY_CHARS + 1): "v"},
        {"k": "v" * (MAX_METADATA_VALUE_CHARS + 1)},
    ],
    ids=["pairs", "key", "value"],
)
def test_response_metadata_out_of_bounds_is_refused(metadata: dict[str, str]) -> None:
    create = cmd(1, create_response=pb.CreateResponse(metadata=metadata))
    with pytest.raises(CommandError) as refused:
        check_command(create, "create_response", LIMITS, ENGINE)
    assert (refused.value.code, refused.value.param) == ("bad_event", "metadata")


@pytest.mark.parametrize(
    "carrier",
    [
        {f"k{index}": "v" for index in range(MAX_METADATA_PAIRS + 1)},
        {"traceparent": "v" * (MAX_METADATA_VALUE_CHARS + 1)},
    ],
    ids=["pairs", "value"],
)
def test_a_trace_context_out_of_bounds_is_refused(carrier: dict[str, str]) -> None:
    commit = cmd(1, commit_input_audio=pb.CommitInputAudio())
    commit.trace_context.update(carrier)
    with pytest.raises(CommandError) as refused:
        check_command(commit, "commit_input_audio", LIMITS, ENGINE)
    assert (refused.value.code, refused.value.param) == ("bad_event", "trace_context")
    commit.trace_context.clear()
    commit.trace_context["traceparent"] = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    check_command(commit, "commit_input_audio", LIMITS, ENGINE)


def test_a_session_answers_an_update_too_deep_in_band_and_goes_on() -> None:
    s = open_session().session
    deep = pb.SessionConfig(engine_options=struct(nested(MAX_STRUCT_DEPTH + 1)))
    refused = decode(
        s.receive(1, cmd(1, "ev-u", update_session=pb.UpdateSession(config=deep)), now=0.0)
    )
    assert [event.error.code for event in refused] == ["bad_event"]
    assert (refused[0].error.param, refused[0].error.event_id) == ("engine_options", "ev-u")
    assert decode(s.receive(1, heartbeat(2), now=0.0))[0].WhichOneof("event") == "heartbeat_ack"
