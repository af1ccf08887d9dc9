"""How a stream ended without its session ending, as both ends of the wire read it.

The service ends a refused or cut stream with a status: a gRPC call's ``google.rpc.Status`` in
the ``grpc-status-details-bin`` trailer (written by ``omni_grpc.server.status``), carrying
``ErrorInfo`` with our error code and, when the caller should come back later, ``RetryInfo``;
an in-process or multiplexed stream gets the same facts without a call. :class:`StreamBroken`
holds them either way, and :meth:`StreamBroken.from_error` is the project's one reader of rich
status (grpcio-status parses the trailer; the details are read here), for the Python client,
the bridge and the service's own in-process streams alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from omni_grpc.wire.keys import REFUSAL_HEADER, route_of


class StreamBroken(Exception):
    """A stream ended without the session ending; ``status`` says how, when known.

    ``code`` is the service's snake_case error code (from ``ErrorInfo``), empty when it sent
    none; ``retry_after_s`` its retry hint (from ``RetryInfo``), 0 when it gave none; ``route``
    the routing key of the replica that holds the session, when another replica said so.
    """

    def __init__(
        self,
        message: str,
        *,
        status: grpc.StatusCode | None = None,
        code: str = "",
        retry_after_s: float = 0.0,
        route: str = "",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after_s = retry_after_s
        self.route = route

    @classmethod
    def from_error(cls, error: grpc.RpcError) -> StreamBroken:
        """Reads a failed call: its status, the service's error code and its retry hint."""
        if not isinstance(error, grpc.aio.AioRpcError):
            return cls(f"transport error: {str(error) or 'no details'}")
        status, details = error.code(), error.details()
        rich = _rich_status(error)
        headers: tuple[tuple[str, str | bytes], ...] = tuple(error.initial_metadata() or ())
        if status == grpc.StatusCode.CANCELLED and (relayed := _relayed_refusal(headers)):
            # A proxy lost the refusal's trailers; its headers carry the same status.
            rich = relayed
            status = next((s for s in grpc.StatusCode if s.value[0] == rich.code), status)
            details = rich.message
        code, retry_after_s = "", 0.0
        for detail in rich.details:
            info = error_details_pb2.ErrorInfo()
            retry = error_details_pb2.RetryInfo()
            if detail.Unpack(info):
                # Refusals carry our snake_case code in metadata; a status without it (the
                # key check's) names only its UPPER_SNAKE reason.
                code = info.metadata.get("code", info.reason.lower())
            elif detail.Unpack(retry):
                retry_after_s = retry.retry_delay.ToMilliseconds() / 1000
        return cls(
            f"{status.name}: {details or 'no details'}",
            status=status,
            code=code,
            retry_after_s=retry_after_s,
            route=route_of(tuple(error.trailing_metadata() or ()) + headers),  # type: ignore[arg-type]
        )


def _relayed_refusal(headers: Sequence[tuple[str, str | bytes]]) -> status_pb2.Status | None:
    """The refusal a server also put in the response headers (REFUSAL_HEADER), if any."""
    for name, value in headers:
        if name == REFUSAL_HEADER and isinstance(value, bytes):
            try:
                return status_pb2.Status.FromString(value)
            except DecodeError:
                return None
    return None


def _rich_status(error: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The call's google.rpc.Status; empty when it has none or one that contradicts the call."""
    try:
        # grpc-stubs does not know that an AioRpcError is the call grpcio-status reads.
        rich: status_pb2.Status | None = rpc_status.from_call(error)  # type: ignore[arg-type]
    except ValueError:
        # The trailer names another code or message than the call ended with (a proxy
        # rewrote the status): the status the call ended with is what is true.
        return status_pb2.Status()
    return rich or status_pb2.Status()


__all__ = ["StreamBroken"]
