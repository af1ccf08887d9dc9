"""How the end of a connection's stream reaches its client: what it is told, and the close code.

The service ends a stream with a gRPC status (and, in its ``ErrorInfo``, a code of its own:
:class:`omni_grpc.client.channel.StreamBroken` carries both). The relay tells the client why, in
its dialect's error event, and closes the websocket with a code a client can act on: 1008 when
retrying cannot help, 1012/1013 to come back later, 1011 otherwise. A few ends are not the end:
a resume refused "not here, not now", or lost in the transport, is tried again; a configuration
the service refused at the open is answered in band.
"""

from __future__ import annotations

import grpc
from aiohttp import WSCloseCode

from bridge.errors import Refusal
from omni_grpc.wire.stream_end import StreamBroken

# Refusals of a resume that say "not here, not now" (the owner is another replica, or the
# session store is away): the relay tries again after the hint instead of ending the session.
_RESUME_RETRIED = frozenset({"session_elsewhere", "session_store_unavailable"})
# A resume's stream that ended without a word from the service (no code) ended in the transport:
# a proxy's 503 for a replica that just died, a reset connection. grpc.aio reports that as
# UNAVAILABLE, or as INTERNAL ("Internal error from Core") when the resume's write raced the end.
# A resume is safe to send again, so the relay tries again, this long apart when no hint came.
_TRANSPORT_ENDS = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL})
TRANSPORT_RETRY_S = 0.25
# Statuses with which the service refuses the configuration a stream opens with.
_CONFIG_REFUSALS = frozenset(
    {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION}
)
_POLICY = WSCloseCode.POLICY_VIOLATION
# How a gRPC status that ends the stream closes the websocket.
_CLOSE_CODES = {
    grpc.StatusCode.UNAVAILABLE: WSCloseCode.SERVICE_RESTART,
    grpc.StatusCode.RESOURCE_EXHAUSTED: WSCloseCode.TRY_AGAIN_LATER,
    grpc.StatusCode.INVALID_ARGUMENT: _POLICY,
    grpc.StatusCode.NOT_FOUND: _POLICY,
    grpc.StatusCode.PERMISSION_DENIED: _POLICY,
    grpc.StatusCode.FAILED_PRECONDITION: _POLICY,
    grpc.StatusCode.UNAUTHENTICATED: _POLICY,
}
# Statuses the dialects have a name for: a key the service refused is what OpenAI clients know
# as invalid_api_key (the bridge's own key check says the same).
_DIALECT_CODES = {grpc.StatusCode.UNAUTHENTICATED: "invalid_api_key"}
# Codes for statuses that came without one of the service's own (the transport's).
_FALLBACK_CODES = {
    grpc.StatusCode.UNAVAILABLE: "service_unavailable",
    grpc.StatusCode.DEADLINE_EXCEEDED: "timeout",
}


def status_refusal(status: grpc.StatusCode, broken: StreamBroken) -> Refusal:
    """What the client is told of the status that ended its stream, with the service's code."""
    code = (
        _DIALECT_CODES.get(status) or broken.code or _FALLBACK_CODES.get(status) or "stream_failed"
    )
    if status is grpc.StatusCode.RESOURCE_EXHAUSTED:
        # OpenAI's clients back off on a rate_limit_error; the hint says for how long.
        retry_after_ms = round(broken.retry_after_s * 1000)
        return Refusal(
            code, str(broken), error_type="rate_limit_error", retry_after_ms=retry_after_ms
        )
    policy = _CLOSE_CODES.get(status) is _POLICY
    return Refusal(
        code, str(broken), error_type="invalid_request_error" if policy else "server_error"
    )


def close_code(status: grpc.StatusCode) -> int:
    """The websocket's close code for a stream the service ended with ``status``."""
    return _CLOSE_CODES.get(status, WSCloseCode.INTERNAL_ERROR)


def tried_again(broken: StreamBroken, *, resuming: bool) -> bool:
    """Whether an attaching stream's end says "not here, not now": a resume refused for now, or
    one lost in the transport. A new session is never opened twice."""
    if broken.code in _RESUME_RETRIED:
        return True
    return resuming and lost_in_transport(broken)


def lost_in_transport(broken: StreamBroken) -> bool:
    """Whether a stream ended without a word from the service (a dead replica, a reset)."""
    return not broken.code and broken.status in _TRANSPORT_ENDS


def refuses_config(status: grpc.StatusCode) -> bool:
    """Whether an attaching stream's end refuses the configuration it opened with."""
    return status in _CONFIG_REFUSALS


__all__ = [
    "TRANSPORT_RETRY_S",
    "close_code",
    "lost_in_transport",
    "refuses_config",
    "status_refusal",
    "tried_again",
]
