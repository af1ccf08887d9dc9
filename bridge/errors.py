"""The one error of the inbound translation: a client event refused before the service sees it."""

from __future__ import annotations


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
