"""The one reader of rich status (``StreamBroken.from_error``), on statuses the service sends.

The statuses are made by the server's own renderer, so a change on either side shows here;
the end-to-end refusals are in test_roundtrip and test_endings.
"""

from __future__ import annotations

import grpc
from google.rpc import status_pb2
from grpc_status import rpc_status

from omni_grpc.core import Status, StreamRefused
from omni_grpc.server.status import rich_status, unauthenticated
from omni_grpc.wire.stream_end import StreamBroken


def failed_call(status: grpc.Status) -> grpc.aio.AioRpcError:
    """What a call that ended with ``status`` raises on the client."""
    return grpc.aio.AioRpcError(
        status.code,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(*status.trailing_metadata),
        details=status.details,
    )


def test_a_refusal_gives_its_code_and_retry_hint() -> None:
    refusal = StreamRefused(
        Status.RESOURCE_EXHAUSTED, "too_many_sessions", "full", retryable=True, retry_after_s=1.5
    )
    broken = StreamBroken.from_error(failed_call(rich_status(refusal)))
    assert broken.status is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (broken.code, broken.retry_after_s) == ("too_many_sessions", 1.5)
    assert str(broken) == "RESOURCE_EXHAUSTED: too_many_sessions: full"


def test_a_status_without_a_metadata_code_gives_its_reason() -> None:
    broken = StreamBroken.from_error(failed_call(unauthenticated()))
    assert (broken.status, broken.code) == (grpc.StatusCode.UNAUTHENTICATED, "unauthenticated")
    assert broken.retry_after_s == 0.0


def test_a_trailer_that_contradicts_the_call_is_ignored() -> None:
    # A proxy that rewrites the status leaves the old trailer behind: the call's status wins.
    stale = rich_status(StreamRefused(Status.NOT_FOUND, "session_not_found", "gone"))
    call = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(*stale.trailing_metadata),
        details="upstream reset",
    )
    broken = StreamBroken.from_error(call)
    assert (broken.status, broken.code) == (grpc.StatusCode.UNAVAILABLE, "")


def test_a_plain_status_has_no_code() -> None:
    plain = rpc_status.to_status(status_pb2.Status(code=14, message="connection refused"))
    broken = StreamBroken.from_error(failed_call(plain))
    assert (broken.status, broken.code, broken.retry_after_s) == (
        grpc.StatusCode.UNAVAILABLE,
        "",
        0.0,
    )
    bare = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata()
    )
    assert StreamBroken.from_error(bare).code == ""
