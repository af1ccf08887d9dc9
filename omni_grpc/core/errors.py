"""Typed errors of the session core and how each maps onto the wire.

A :class:`CommandError` refuses one command; the session stays usable and the client gets an
``error`` event. A :class:`StreamRefused` refuses a whole stream (a bad first message, a resume
that cannot be honoured); the transport ends the stream with the matching status.
Codes are stable snake_case strings, the same on gRPC and on the websocket bridge, and where the
reference protocol has a code for the same condition we use its spelling.
"""

from __future__ import annotations

import enum

from omni_grpc.wire import pb
from omni_grpc.wire.bounds import echoed_event_id


class Status(enum.Enum):
    """The gRPC status a refused stream ends with, named without importing grpc."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"


# Both sets are drawn from the closed set of codes (omni_grpc/wire/error_codes.py).
RATE_LIMIT_CODES = frozenset(
    {
        "resource_exhausted",
        "queue_full",
        "queue_wait_exceeded",
        "input_backpressure",
        "rate_limit_exceeded",
    }
)
SERVER_CODES = frozenset(
    {
        "internal_error",
        "engine_error",
        "model_request_failed",
        "prompt_template_failed",
        "speech_synthesis_failed",
        "transcription_failed",
    }
)


def error_type(code: str) -> pb.ErrorType.ValueType:
    """Classifies a code the way OpenAI's Realtime API classifies its errors."""
    if code in RATE_LIMIT_CODES:
        return pb.ERROR_TYPE_RATE_LIMIT
    if code in SERVER_CODES:
        return pb.ERROR_TYPE_SERVER
    return pb.ERROR_TYPE_INVALID_REQUEST


class CommandError(Exception):
    """One command was refused; the session goes on."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str = "",
        retryable: bool = False,
        retry_after_s: float = 0.0,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.param = param
        self.retryable = retryable
        self.retry_after_s = retry_after_s

    def to_error(self, *, client_seq: int = 0, event_id: str = "") -> pb.ErrorReport:
        """Renders the error event body, echoing the offending command's numbers (its
        ``event_id`` only when it is of an id's size: ``wire/bounds.py``)."""
        error = pb.ErrorReport(
            code=self.code,
            type=error_type(self.code),
            message=self.message,
            param=self.param,
            client_seq=client_seq,
            event_id=echoed_event_id(event_id),
            retryable=self.retryable,
        )
        if self.retry_after_s:
            error.retry_after.FromMilliseconds(int(self.retry_after_s * 1000))
        return error


class StreamRefused(CommandError):
    """A stream cannot go on: it gets one error and ends with ``status``."""

    def __init__(
        self,
        status: Status,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        retry_after_s: float = 0.0,
    ) -> None:
        super().__init__(code, message, retryable=retryable, retry_after_s=retry_after_s)
        self.status = status
