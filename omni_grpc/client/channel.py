"""The gRPC plumbing under the duplex client and the websocket bridge: channels, calls, and
reading why a call failed.

Everything here is about one stream at a time; :mod:`omni_grpc.client.client` (and the bridge's
relay) decide when to open streams and what to do when one fails. Calls are wrapped so that a
stream that broke (or that another task cancelled) always surfaces as :class:`StreamBroken`,
never as a ``CancelledError`` that would look like the caller's own task being cancelled.

:class:`StreamBroken` (how a stream ended, with the service's code and retry hint) lives in the
vocabulary both ends share, :mod:`omni_grpc.wire.stream_end`, which also reads rich status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from omni_grpc.gen.omni.duplex.v1.duplex_pb2_grpc import DuplexServiceStub
from omni_grpc.wire import pb
from omni_grpc.wire.keys import ROUTE_HEADER, bearer_metadata, resume_token_metadata, route_of
from omni_grpc.wire.stream_end import StreamBroken

DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024

# Statuses that say the stream (not the session or the request) failed: trying again, to open
# or to resume, may well work. A retried open may leave an orphan session on the server; it
# expires after the disconnect grace, which beats failing an open a retry would have saved.
TRANSIENT_STATUSES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelSettings:
    """Where and how to connect. ``api_key`` never appears in a repr or a log line."""

    target: str
    api_key: str | None = field(default=None, repr=False)
    tls: bool = False
    root_certificates: bytes | None = field(default=None, repr=False)
    tls_server_name: str | None = None  # overrides the name checked in the server certificate
    keepalive_time_s: float = 20.0
    keepalive_timeout_s: float = 10.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    # The channel's own reconnect pacing; kept close to the client's backoff so an attempt is
    # never refused only because gRPC is still waiting out a longer backoff of its own.
    initial_reconnect_backoff_s: float = 0.05
    max_reconnect_backoff_s: float = 2.0
    extra_options: tuple[tuple[str, Any], ...] = ()

    def options(self) -> list[tuple[str, Any]]:
        """The channel options: message caps, keepalive, reconnect pacing, no gRPC retries."""
        options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.keepalive_time_ms", int(self.keepalive_time_s * 1000)),
            ("grpc.keepalive_timeout_ms", int(self.keepalive_timeout_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.initial_reconnect_backoff_ms", int(self.initial_reconnect_backoff_s * 1000)),
            # Not grpc.min_reconnect_backoff_ms: gRPC also takes it as the connect timeout,
            # and a few milliseconds of that fail connections on a busy machine.
            ("grpc.max_reconnect_backoff_ms", int(self.max_reconnect_backoff_s * 1000)),
            # Resending is this client's job: it knows which commands the server applied.
            ("grpc.enable_retries", 0),
        ]
        if self.tls_server_name:
            options.append(("grpc.ssl_target_name_override", self.tls_server_name))
        options.extend(self.extra_options)
        return options

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata: the API key as a bearer token, when there is one."""
        return bearer_metadata(self.api_key or "")

    def open(self) -> grpc.aio.Channel:
        """Opens a channel (connecting lazily, on the first call)."""
        if self.tls or self.root_certificates:
            credentials = grpc.ssl_channel_credentials(root_certificates=self.root_certificates)
            return grpc.aio.secure_channel(self.target, credentials, options=self.options())
        return grpc.aio.insecure_channel(self.target, options=self.options())


def _interrupted() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Stream:
    """One Converse call, with reads and writes that fail only with StreamBroken."""

    __slots__ = ("_call",)

    def __init__(
        self, call: grpc.aio.StreamStreamCall[pb.ConverseRequest, pb.ConverseResponse]
    ) -> None:
        self._call = call

    async def write(self, request: pb.ConverseRequest) -> None:
        """Sends one request, waiting for flow control."""
        try:
            await self._call.write(request)
        except grpc.RpcError as error:
            raise StreamBroken.from_error(error) from None
        except asyncio.InvalidStateError:
            raise StreamBroken("the stream already ended") from None
        except asyncio.CancelledError:
            if _interrupted():
                raise
            raise StreamBroken("the stream was cancelled") from None

    async def route(self) -> str:
        """The routing key the server sent with its first answer; empty when it sent none."""
        try:
            return route_of(tuple(await self._call.initial_metadata() or ()))
        except grpc.RpcError:
            return ""

    async def read(self) -> pb.ConverseResponse | None:
        """Returns the next event, or None when the server ended the stream cleanly."""
        try:
            reply = await self._call.read()
        except grpc.RpcError as error:
            raise StreamBroken.from_error(error) from None
        except asyncio.CancelledError:
            if _interrupted():
                raise
            raise StreamBroken("the stream was cancelled") from None
        # read() returns the EOF sentinel, the only non-message, when the stream ended.
        return reply if isinstance(reply, pb.ConverseResponse) else None

    def cancel(self) -> None:
        """Drops the stream; the server sees the client go away."""
        self._call.cancel()


class Connection:
    """A channel to one target and the calls the duplex client (or the bridge) makes on it."""

    def __init__(self, settings: ChannelSettings) -> None:
        self.settings = settings
        self._channel = settings.open()
        self._stub = DuplexServiceStub(self._channel)
        self._metadata = settings.metadata()
        # The routing key of the replica holding this client's session, sent back on each call
        # so a proxy in front of several replicas takes it there (empty: any replica).
        self.route = ""

    def _routed(self) -> tuple[tuple[str, str], ...]:
        return self._metadata + (((ROUTE_HEADER, self.route),) if self.route else ())

    def converse(self, metadata: Sequence[tuple[str, str]] | None = None) -> Stream:
        """Starts a Converse call (it connects on the first write).

        ``metadata`` replaces the settings' own, for a bridge whose calls each present the key
        of the websocket client they carry.
        """
        chosen = self._routed() if metadata is None else tuple(metadata)
        return Stream(self._stub.Converse(None, metadata=chosen))

    async def get_capabilities(self, timeout_s: float = 10.0) -> pb.Capabilities:
        """Asks the server what it accepts, before any session."""
        try:
            reply = await self._stub.GetCapabilities(
                pb.GetCapabilitiesRequest(), timeout=timeout_s, metadata=self._metadata
            )
        except grpc.RpcError as error:
            raise StreamBroken.from_error(error) from None
        return reply.capabilities

    async def get_session(
        self, session_id: str, token: str, timeout_s: float = 10.0
    ) -> pb.GetSessionResponse:
        """Looks a session up with its current resume token, which travels in call metadata
        (not in the message, which logging interceptors record)."""
        request = pb.GetSessionRequest(session_id=session_id)
        metadata = self._routed() + resume_token_metadata(token)
        try:
            return await self._stub.GetSession(request, timeout=timeout_s, metadata=metadata)
        except grpc.RpcError as error:
            raise StreamBroken.from_error(error) from None

    async def close(self) -> None:
        """Closes the channel and every call on it."""
        await self._channel.close(None)
