"""The errors the bridge tells clients of itself, and the codes it adds to the service's own
(omni_grpc/wire/error_codes.py).

A websocket client gets the service's codes unchanged, plus these few about JSON, the dialect
and the connection; ``tests/test_error_codes.py`` holds the bridge's code to the two sets.
:class:`DialectError` is a client event a dialect refuses; :class:`Refusal` is what the relay
hands its dialect to tell a client (a refused event, or the end of a stream), which the dialect
renders in its own JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

from omni_grpc.wire.bounds import echoed_event_id

BRIDGE_ERROR_CODES: dict[str, str] = {
    "invalid_json": "the frame is not valid JSON",
    "unknown_event": "the event type is not one the bridge knows",
    "unsupported_item_type": "a conversation item type the service does not take",
    "unsupported_content_type": "a content part type the service does not take",
    "unsupported_session_type": "a session type other than realtime",
    "unsupported_field": "an OpenAI field set to something the service cannot honour",
    "invalid_api_key": "the service refused the API key",
    "service_unavailable": "the gRPC service could not be reached",
    "timeout": "the gRPC service did not answer in time",
    "stream_failed": "the gRPC stream ended with a status that has no code of its own",
}
# The service's refusal of a command over its rate limits (omni_grpc.core.rate_limits): its
# retry hint holds the client's input back (bridge.relay), and the dialects name the limit.
RATE_LIMIT_CODE = "rate_limit_exceeded"


@dataclass(frozen=True, slots=True)
class Refusal:
    """An error the bridge itself tells a client: a client event it refused, or why the service
    ended (or refused) the connection's stream (:mod:`bridge.stream_ends`)."""

    code: str
    message: str
    error_type: str = "invalid_request_error"
    param: str = ""
    event_id: str = ""  # the client event refused, if any
    retry_after_ms: int = 0  # when the client may try again: a rate limit's hint


class DialectError(Exception):
    """A client event the bridge refuses before it reaches the service.

    It becomes an ``error`` event with ``code`` (OpenAI's nested shape, in both dialects); the
    websocket stays open.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str = "",
        event_id: str = "",
        error_type: str = "invalid_request_error",
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.param = param
        self.event_id = event_id
        self.error_type = error_type

    def refusal(self) -> Refusal:
        """What the client is told of this error."""
        echoed = echoed_event_id(self.event_id)
        return Refusal(self.code, self.message, self.error_type, self.param, echoed)


def event_too_large(limit: int) -> DialectError:
    """The refusal of a frame over the event cap: a dialect's, or the relay's for a frame the
    bridge dropped unread (bridge.frame_meter)."""
    return DialectError("event_too_large", f"an event may have at most {limit} bytes")
