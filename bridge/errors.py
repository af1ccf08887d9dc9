"""The one error of the inbound translation: a client event refused before the service sees it,
and the codes the bridge adds to the service's own (omni_grpc/wire/error_codes.py).

A websocket client gets the service's codes unchanged, plus these few about JSON, the dialect
and the connection; ``tests/test_error_codes.py`` holds the bridge's code to the two sets.
"""

from __future__ import annotations

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


class DialectError(Exception):
    """A client event the bridge refuses before it reaches the service.

    It becomes OpenAI's nested ``error`` event with ``code``; the websocket stays open.
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
