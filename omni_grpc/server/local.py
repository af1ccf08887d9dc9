"""The in-process entry point: a bridge in the service's own process reaches the sessions
without a gRPC hop.

:class:`LocalService` stands beside :class:`~omni_grpc.server.servicer.DuplexServicer` and
offers what the bridge uses of a gRPC connection (``converse`` opening one stream, a
:class:`~omni_grpc.server.local_stream.LocalStream`: a stream into the sessions with a gRPC
client stream's reads and writes, its checks before it opens those of every stream). What it
saves per chunk is a gRPC client write and read and the server's read and write, with their
serializing and the HTTP/2 framing between them.
"""

from __future__ import annotations

from collections.abc import Sequence

from omni_grpc.server.local_stream import LocalStream
from omni_grpc.server.sessions import Sessions
from omni_grpc.server.stream import StreamGate
from omni_grpc.server.stream_cap import StreamCap

PEER = "in-process"  # what the refusal log names as the peer of an in-process stream


class LocalService:
    """The sessions of this process, reached without a network hop."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        api_keys: Sequence[str] = (),
        max_streams: int = 1024,
        cap: StreamCap | None = None,
    ) -> None:
        self.sessions = sessions
        # The server's one bound on streams, shared with its Converse calls (see stream_cap);
        # a cap of its own (``max_streams``) when none is given.
        self.cap = cap if cap is not None else StreamCap(max_streams)
        self.gate = StreamGate(tuple(api_keys), self.cap)

    @property
    def streams(self) -> int:
        """The streams that hold a place in the cap now (of every kind, when it is shared)."""
        return self.cap.open

    def converse(
        self, metadata: Sequence[tuple[str, str]] | None = None, peer: str = PEER
    ) -> LocalStream:
        """Starts a stream; it opens or resumes on its first write, as a Converse call does."""
        return LocalStream(self.sessions, self.gate, tuple(metadata or ()), peer)

    async def close(self) -> None:
        """Nothing to close: the streams end with the relays that hold them."""


__all__ = ["LocalService", "LocalStream"]
