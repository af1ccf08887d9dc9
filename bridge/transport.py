"""The seam between a relay and the service: what the bridge needs of a connection to it.

Two things fit: :class:`omni_grpc.client.channel.Connection`, a gRPC channel to a service in
another process (``omni-grpc bridge``), and the service's own in-process entry point, handed in
by the launcher when bridge and service share a process (``omni-grpc serve``), which saves the
gRPC hop. Both end failed streams with :class:`~omni_grpc.client.channel.StreamBroken`, so a
relay behaves the same over either.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from omni_grpc.wire import pb


class ServiceStream(Protocol):
    """One Converse stream: its first write opens or resumes a session."""

    async def write(self, request: pb.ConverseRequest) -> None: ...

    async def read(self) -> pb.ConverseResponse | None: ...

    def cancel(self) -> None: ...


@runtime_checkable
class InlineStream(ServiceStream, Protocol):
    """A stream whose events may be written at once by the task that wrote the command that
    made them (the in-process one, with ``flush``): an echoed chunk goes back without waking
    the task that reads the stream. Every event, flushed or read serialized (and written with
    ``write_out``), goes out one at a time, in the order the session made them."""

    async def write(self, request: pb.ConverseRequest, *, flush_follows: bool = False) -> None:
        """``flush_follows``: :meth:`flush` comes right after, and takes what the command
        made; the task that reads the stream is not woken for it meanwhile."""

    async def read_serialized(self) -> bytes | None: ...

    async def flush(self, write: Callable[[bytes], Awaitable[None]]) -> None: ...

    async def write_out(
        self, write: Callable[[bytes], Awaitable[None]], payload: bytes
    ) -> None: ...


class ServiceLink(Protocol):
    """Where a relay's streams go."""

    def converse(self, metadata: Sequence[tuple[str, str]] | None = None) -> ServiceStream: ...

    async def close(self) -> None: ...
