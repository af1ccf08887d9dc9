"""The typed failures a :class:`~omni_grpc.client.DuplexClient` raises.

Transport trouble (a reset connection, an unavailable server, a ``going_away``) never reaches
the caller: the client resumes the session and the events go on. What does reach the caller is
one of these, each meaning something different to do next:

* :class:`OpenRefused`: no session was opened (bad configuration, no capacity, bad API key);
* :class:`ConnectionLost`: the session may still exist, but every reconnect attempt failed;
* :class:`SessionEnded` and its kinds: the session is over for this client, for the reason
  the subclass names. :class:`ResyncRequired` means the session still lives but its missed
  events cannot be replayed, so the caller must rebuild its view (``GetSession``) or start over.
"""

from __future__ import annotations

import grpc

from omni_grpc.wire import pb


class DuplexClientError(Exception):
    """Base of every error the duplex client raises."""


class OpenRefused(DuplexClientError):
    """The server refused to open a session (or the handshake failed for good)."""

    def __init__(
        self,
        message: str,
        *,
        status: grpc.StatusCode | None,
        code: str = "",
        retry_after_s: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code  # the server's snake_case error code, when it sent one
        self.retry_after_s = retry_after_s


class ConnectionLost(DuplexClientError):
    """Reconnecting gave up (attempts or time ran out); the last failure is the cause."""

    def __init__(self, message: str, *, attempts: int, status: grpc.StatusCode | None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.status = status


class ProtocolViolation(DuplexClientError):
    """The server broke the protocol (an event gap, an unexpected first reply)."""


class CommandTooLarge(DuplexClientError, ValueError):
    """A command is larger than the server accepts; it was not sent."""


class SessionEnded(DuplexClientError):
    """The session is over for this client; ``event`` is the server's last word, if any."""

    def __init__(
        self, message: str, *, session_id: str, event: pb.ConverseResponse | None = None
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.event = event


class SessionClosed(SessionEnded):
    """The session was closed (by this client, another one, or the server)."""

    def __init__(
        self,
        message: str,
        *,
        session_id: str,
        reason: str,
        event: pb.ConverseResponse | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id, event=event)
        self.reason = reason


class SessionExpired(SessionEnded):
    """The server let the session lapse (idle timeout, disconnect grace, engine failure)."""

    def __init__(
        self,
        message: str,
        *,
        session_id: str,
        reason: pb.ExpiryReason.ValueType = pb.EXPIRY_REASON_UNSPECIFIED,
        event: pb.ConverseResponse | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id, event=event)
        self.reason = reason


class SessionReplaced(SessionEnded):
    """Another stream resumed the session and took it over."""


class ResyncRequired(SessionEnded):
    """The events this client missed cannot be replayed; its view must be rebuilt."""

    def __init__(
        self,
        message: str,
        *,
        session_id: str,
        reason: pb.ResyncReason.ValueType = pb.RESYNC_REASON_UNSPECIFIED,
        event: pb.ConverseResponse | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id, event=event)
        self.reason = reason


class ResumeRefused(SessionEnded):
    """The server refused to resume: a wrong token, or an unknown or ended session."""

    def __init__(
        self, message: str, *, session_id: str, status: grpc.StatusCode | None, code: str = ""
    ) -> None:
        super().__init__(message, session_id=session_id)
        self.status = status
        self.code = code
