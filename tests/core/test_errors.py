"""Error codes: how each is classified, and how an error renders on the wire."""

from __future__ import annotations

import pytest

from omni_grpc.core.errors import CommandError, error_type
from omni_grpc.wire import pb


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("resource_exhausted", pb.ERROR_TYPE_RATE_LIMIT),
        ("input_backpressure", pb.ERROR_TYPE_RATE_LIMIT),
        ("rate_limit_exceeded", pb.ERROR_TYPE_RATE_LIMIT),
        ("internal_error", pb.ERROR_TYPE_SERVER),
        ("engine_error", pb.ERROR_TYPE_SERVER),
        ("model_request_failed", pb.ERROR_TYPE_SERVER),
        ("bad_event", pb.ERROR_TYPE_INVALID_REQUEST),
        ("client_seq_gap", pb.ERROR_TYPE_INVALID_REQUEST),
    ],
)
def test_error_type(code: str, expected: int) -> None:
    assert error_type(code) == expected


def test_command_error_renders_without_a_retry_hint_unless_given() -> None:
    error = CommandError("bad_event", "nope", param="audio")
    assert str(error) == "bad_event: nope"
    assert not error.to_error().HasField("retry_after")


def test_an_error_echoes_an_event_id_only_of_an_ids_size() -> None:
    error = CommandError("bad_event", "nope")
    assert error.to_error(event_id="e" * 512).event_id == "e" * 512
    assert error.to_error(event_id="e" * 513).event_id == ""  # a payload, not an id
