"""Starting streams: the first message, its first answer, and retrying what is transient.

A :class:`Dialer` turns "open a session" or "resume this one" into either a stream whose first
reply is ``session_created`` / ``session_resumed``, or one typed error. Transient failures are
retried with the backoff policy; the server's retry hint (``RetryInfo``) stretches a delay,
never shortens it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from omni_grpc.client.backoff import ReconnectPolicy
from omni_grpc.client.channel import (
    TRANSIENT_STATUSES,
    Connection,
    Stream,
)
from omni_grpc.client.errors import (
    ConnectionLost,
    DuplexClientError,
    OpenRefused,
    ProtocolViolation,
    ResumeRefused,
    ResyncRequired,
    SessionClosed,
)
from omni_grpc.wire import pb
from omni_grpc.wire.stream_end import StreamBroken

logger = logging.getLogger(__name__)

# Turns a non-retryable failure into the error the caller sees.
_Refusal = Callable[[StreamBroken], DuplexClientError]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeRequest:
    """A resume to attempt; ``closing`` says the client already asked to close."""

    session_id: str
    token: str
    last_seq: int
    grace_s: float = 0.0  # the server's disconnect grace; 0 when unknown
    closing: bool = False


class Dialer:
    """Opens Converse streams for one client."""

    def __init__(
        self, connection: Connection, *, handshake_timeout_s: float, rng: random.Random
    ) -> None:
        self._conn = connection
        self._timeout_s = handshake_timeout_s
        self._rng = rng

    async def open(
        self, config: pb.SessionConfig, policy: ReconnectPolicy
    ) -> tuple[Stream, pb.ConverseResponse]:
        """A stream whose first reply was ``session_created``; raises OpenRefused or
        ConnectionLost."""
        request = pb.ConverseRequest(open_session=pb.OpenSession(config=config))
        stream, first = await self._retry(
            request,
            policy,
            limit_s=policy.max_elapsed_s,
            retry_on=TRANSIENT_STATUSES,
            refused=self._open_refused,
            label="-",
        )
        if first.WhichOneof("event") != "session_created":
            stream.cancel()
            raise ProtocolViolation(f"expected session_created, got {first.WhichOneof('event')}")
        return stream, first

    async def resume(
        self, resume: ResumeRequest, policy: ReconnectPolicy
    ) -> tuple[Stream, pb.ConverseResponse]:
        """A stream whose first reply was ``session_resumed``; raises ResyncRequired,
        ResumeRefused, ConnectionLost, or SessionClosed (a close applied before the break)."""
        request = pb.ConverseRequest(
            resume_session=pb.ResumeSession(
                session_id=resume.session_id,
                resume_token=resume.token,
                last_received_seq=resume.last_seq,
            )
        )
        limit_s = policy.max_elapsed_s
        if resume.grace_s > 0:
            limit_s = min(limit_s, resume.grace_s)  # past the grace the session is gone anyway

        def refused(broken: StreamBroken) -> DuplexClientError:
            if resume.closing and broken.status == grpc.StatusCode.NOT_FOUND:
                return SessionClosed(
                    "the session was closed", session_id=resume.session_id, reason="client_close"
                )
            return ResumeRefused(
                f"the server refused the resume: {broken}",
                session_id=resume.session_id,
                status=broken.status,
                code=broken.code,
            )

        stream, first = await self._retry(
            request,
            policy,
            limit_s=limit_s,
            retry_on=TRANSIENT_STATUSES,
            refused=refused,
            label=resume.session_id,
        )
        kind = first.WhichOneof("event")
        if kind == "resync_required":
            stream.cancel()
            raise ResyncRequired(
                "the server cannot replay the missed events",
                session_id=resume.session_id,
                reason=first.resync_required.reason,
                event=first,
            )
        if kind != "session_resumed":
            stream.cancel()
            raise ProtocolViolation(f"expected session_resumed, got {kind}")
        return stream, first

    async def _retry(
        self,
        request: pb.ConverseRequest,
        policy: ReconnectPolicy,
        *,
        limit_s: float,
        retry_on: frozenset[grpc.StatusCode],
        refused: _Refusal,
        label: str,
    ) -> tuple[Stream, pb.ConverseResponse]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        delays = policy.delays(self._rng)
        attempt = 0
        while True:
            attempt += 1
            try:
                stream, first = await self._handshake(request)
            except StreamBroken as broken:
                if broken.route:
                    self._conn.route = broken.route  # the replica that holds the session
                if broken.status is not None and broken.status not in retry_on:
                    raise refused(broken) from None
                delay = max(next(delays), broken.retry_after_s)
                if attempt >= policy.max_attempts or loop.time() - started + delay > limit_s:
                    if request.HasField("open_session") and (
                        broken.status == grpc.StatusCode.RESOURCE_EXHAUSTED
                    ):
                        raise refused(broken) from None
                    raise ConnectionLost(
                        f"cannot reach {self._conn.settings.target} after {attempt} attempts: "
                        f"{broken}",
                        attempts=attempt,
                        status=broken.status,
                    ) from None
                logger.debug(
                    "session %s: attempt %d failed (%s); next in %.0f ms",
                    label,
                    attempt,
                    broken,
                    delay * 1000,
                    extra={"session_id": label} if label != "-" else None,
                )
                await asyncio.sleep(delay)
                continue
            if route := await stream.route():
                self._conn.route = route
            return stream, first

    async def _handshake(self, request: pb.ConverseRequest) -> tuple[Stream, pb.ConverseResponse]:
        stream = self._conn.converse()
        try:
            async with asyncio.timeout(self._timeout_s):
                await stream.write(request)
                first = await stream.read()
        except TimeoutError:
            stream.cancel()
            raise StreamBroken(
                "the server did not answer the handshake in time",
                status=grpc.StatusCode.DEADLINE_EXCEEDED,
            ) from None
        except BaseException:
            stream.cancel()
            raise
        if first is None:
            stream.cancel()
            raise StreamBroken("the server ended the stream before answering")
        return stream, first

    @staticmethod
    def _open_refused(broken: StreamBroken) -> DuplexClientError:
        return OpenRefused(
            f"the server refused the session: {broken}",
            status=broken.status,
            code=broken.code,
            retry_after_s=broken.retry_after_s,
        )
