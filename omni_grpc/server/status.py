"""Where core refusals become gRPC statuses: the one place errors are mapped for this transport.

A refused stream ends with a status code, a human message, and a ``google.rpc.Status`` in the
trailing metadata carrying ``ErrorInfo`` (our stable code as ``reason``) and, when the client
should come back later, ``RetryInfo`` with the delay. Clients in any language read those with
their grpc status library; our Python client reads them with grpcio-status.
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from omni_grpc.core.errors import Status, StreamRefused
from omni_grpc.wire.keys import REFUSAL_HEADER

DOMAIN = "omni.duplex.v1"
# How long a call refused before it is served may take to send its first message (see
# refuse_call): long enough for a write already on its way, short enough that a call that never
# writes holds nothing worth having.
FIRST_WRITE_GRACE_S = 0.2

_CODES: dict[Status, tuple[grpc.StatusCode, int]] = {
    Status.INVALID_ARGUMENT: (grpc.StatusCode.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT),
    Status.NOT_FOUND: (grpc.StatusCode.NOT_FOUND, code_pb2.NOT_FOUND),
    Status.PERMISSION_DENIED: (grpc.StatusCode.PERMISSION_DENIED, code_pb2.PERMISSION_DENIED),
    Status.FAILED_PRECONDITION: (grpc.StatusCode.FAILED_PRECONDITION, code_pb2.FAILED_PRECONDITION),
    Status.RESOURCE_EXHAUSTED: (grpc.StatusCode.RESOURCE_EXHAUSTED, code_pb2.RESOURCE_EXHAUSTED),
    Status.UNAVAILABLE: (grpc.StatusCode.UNAVAILABLE, code_pb2.UNAVAILABLE),
}


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def rich_status(refusal: StreamRefused) -> grpc.Status:
    """Renders a refusal as a gRPC status with ErrorInfo and, if retryable, RetryInfo."""
    _, numeric = _CODES[refusal.status]
    details = [
        _pack(
            error_details_pb2.ErrorInfo(
                reason=refusal.code.upper(), domain=DOMAIN, metadata={"code": refusal.code}
            )
        )
    ]
    if refusal.retryable:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(int(refusal.retry_after_s * 1000))
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    message = f"{refusal.code}: {refusal.message}"
    return rpc_status.to_status(status_pb2.Status(code=numeric, message=message, details=details))


def unauthenticated() -> grpc.Status:
    """The status of a call without a valid API key; says nothing about the keys."""
    return rpc_status.to_status(
        status_pb2.Status(
            code=code_pb2.UNAUTHENTICATED,
            message="unauthenticated: a valid API key is required",
            details=[_pack(error_details_pb2.ErrorInfo(reason="UNAUTHENTICATED", domain=DOMAIN))],
        )
    )


async def refuse_call(
    context: grpc.aio.ServicerContext,
    code: grpc.StatusCode,
    details: str,
    trailing_metadata: tuple[tuple[str, str | bytes], ...] = (),
    *,
    streaming: bool,
) -> None:
    """Ends a call refused before it is served (no key, no place) with a status: a call whose
    responses stream (``streaming``) has it set, and its handler returns right after; any
    other is aborted (raises), as grpc.aio sends a unary call's status without a response only
    for an abort.

    Its first message, if one is on its way, is read (and dropped) first. A Python client
    writes the first message of a stream and then reads; when the status overtakes that write,
    grpc.aio reports the failed write instead of the status, as ``INTERNAL`` ("Internal error
    from Core"; about 1 call in 400 here), and the client sees neither the code nor its retry
    delay. Read, the write has landed, and the client reads the status.

    Set, not raised, where it can be (Converse and every streaming method): gRPC keeps an
    abort's exception on the call, and its traceback holds the handler's frames, which hold the
    call: a cycle of some 50 objects per refusal that only the cyclic collector frees. A key
    refused a thousand times a second made that a full collection of 100-260 ms every second,
    stalling every other tenant.
    """
    with contextlib.suppress(Exception):  # nothing, a message, or a broken call: refused alike
        await asyncio.wait_for(context.read(), FIRST_WRITE_GRACE_S)
    if not streaming:
        await context.abort(code, details, trailing_metadata)
    # The status in the headers too: a proxy may lose the trailers of a stream ended before the
    # client half-closed, and the client reads it there (REFUSAL_HEADER).
    relayed = tuple((REFUSAL_HEADER, v) for k, v in trailing_metadata if k.endswith("-bin"))
    if relayed:
        with contextlib.suppress(Exception):  # a call already gone has nobody to tell
            await context.send_initial_metadata(relayed)
    context.set_code(code)
    context.set_details(details)
    context.set_trailing_metadata(trailing_metadata)
