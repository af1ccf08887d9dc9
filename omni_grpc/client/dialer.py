"""Starting streams: the first message, its first answer, and retrying what is transient.

A :class:`Dialer` turns "open a session" or "resume this one" into either a stream whose first
reply is ``session_created`` / ``session_resumed``, or one typed error. Transient failures are
retried with the backoff policy; the server's retry hint (``RetryInfo``) stretches a delay,
never shortens it. An open that reaches a server at capacity waits in its queue
(``session_queued``, reported to ``on_queued``) until ``session_created``; a wait cut in the
transport is resumed with the wait's id and token, keeping its place.
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
# The status of a stream whose wait in the queue was refused in band (an unnumbered error).
_WAIT_REFUSALS: dict[str, grpc.StatusCode] = {
    "queue_wait_exceeded": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "server_shutting_down": grpc.StatusCode.UNAVAILABLE,
}


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
        self,
        config: pb.SessionConfig,
        policy: ReconnectPolicy,
        on_queued: Callable[[pb.SessionQueued], None] | None = None,
    ) -> tuple[Stream, pb.ConverseResponse]:
        """A stream whose reply was ``session_created``, after any wait in the server's queue
        (each ``session_queued`` goes to ``on_queued``); raises OpenRefused or ConnectionLost.

        The reply is ``session_resumed`` instead when the session was admitted just as a cut
        wait was resumed: the stream is the session's then, as after a takeover.
        """
        request = pb.ConverseRequest(open_session=pb.OpenSession(config=config))
        stream, first = await self._retry(
            request,
            policy,
            limit_s=policy.max_elapsed_s,
            retry_on=TRANSIENT_STATUSES,
            refused=self._open_refused,
            label="-",
        )
        waited: pb.SessionQueued | None = None  # the first notice: the wait's id and token
        while first.WhichOneof("event") == "session_queued":
            if waited is None:
                waited = first.session_queued
            if on_queued is not None:
                on_queued(first.session_queued)
            stream, first = await self._wait_on(stream, waited, policy)
        kind = first.WhichOneof("event")
        if kind == "error" and first.seq == 0 and first.error.code in _WAIT_REFUSALS:
            stream.cancel()  # the wait was refused in band (the status may be lost on a proxy)
            error = first.error
            raise self._open_refused(
                StreamBroken(
                    f"{error.code}: {error.message}",
                    status=_WAIT_REFUSALS[error.code],
                    code=error.code,
                    retry_after_s=error.retry_after.ToMilliseconds() / 1000,
                )
            )
        if kind != "session_created" and not (waited and kind == "session_resumed"):
            stream.cancel()
            raise ProtocolViolation(f"expected session_created, got {kind}")
        return stream, first

    async def _wait_on(
        self, stream: Stream, waited: pb.SessionQueued, policy: ReconnectPolicy
    ) -> tuple[Stream, pb.ConverseResponse]:
        """The next event of a wait in the queue: read on, or after a cut in the transport,
        resume the wait (its place is kept for the server's disconnect grace)."""
        try:
            event = await stream.read()
            if event is not None:
                return stream, event
            broken = StreamBroken("the server ended the stream while it waited")
        except StreamBroken as failure:
            broken = failure
        stream.cancel()
        if broken.code or broken.status is None or broken.status not in TRANSIENT_STATUSES:
            raise self._open_refused(broken)
        logger.info(
            "session %s: its wait was cut (%s); resuming it",
            waited.session_id,
            broken,
            extra={"session_id": waited.session_id},
        )
        resume = pb.ResumeSession(session_id=waited.session_id, resume_token=waited.resume_token)
        return await self._retry(
            pb.ConverseRequest(resume_session=resume),
            policy,
            limit_s=policy.max_elapsed_s,
            retry_on=TRANSIENT_STATUSES,
            refused=self._open_refused,
            label=waited.session_id,
        )

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
