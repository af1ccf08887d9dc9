"""A resume through the bridge whose stream is lost in the transport is tried again.

Between the bridge and the service, a connection can end without a word from the service: a
proxy answers 503 for a replica that just died, a connection is reset. gRPC reports that as
UNAVAILABLE with no code of the service's (or as INTERNAL when the resume's write raced it). A
resume is safe to send again, so the relay tries again a little later, as it does for a
replica's "not here, not now", instead of handing the client an error that ends its session.
Here the bridge reaches a real service through a TCP forwarder that is told to reset every
connection for a while, the way a proxy loses a replica.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from bridge import relay
from tests.bridge.testkit import WITH_EXTENSIONS, realtime_socket, running_bridge, service_settings
from tests.serving import serving


class Forwarder:
    """Forwards TCP connections to ``port``; while ``resetting``, resets each one at once."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.resetting = False
        self.reset = 0  # connections reset so far
        self._open: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def cut(self) -> None:
        """Resets every connection open now; new ones are reset too until ``resetting`` ends."""
        self.resetting = True
        for writer in self._open:
            writer.transport.abort()

    async def stop(self) -> None:
        self.cut()
        self._server.close()
        for pipe in self._pipes:
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.resetting:
            self.reset += 1
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self._open |= {writer, up_writer}
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pipe = asyncio.create_task(self._pipe(source, sink))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        sink.transport.abort()
        self._open.discard(sink)


@contextlib.asynccontextmanager
async def bridge_through_forwarder() -> AsyncIterator[tuple[Forwarder, int]]:
    """A real service, a forwarder in front of it, and a bridge that reaches the service
    through the forwarder; yields the forwarder and the bridge's port."""
    async with serving(service_settings()) as running:
        forwarder = Forwarder(int(running.target.rsplit(":", 1)[1]))
        port = await forwarder.start()
        try:
            async with running_bridge(f"127.0.0.1:{port}") as bridge_port:
                yield forwarder, bridge_port
        finally:
            await forwarder.stop()


async def test_a_resume_lost_in_the_transport_is_tried_again_until_it_lands() -> None:
    async with bridge_through_forwarder() as (forwarder, bridge_port):
        async with realtime_socket(bridge_port, WITH_EXTENSIONS) as ws:
            created = await ws.recv()
            assert created["type"] == "session.created"
        # The service is lost for a while: the bridge's connection is reset, and so is
        # every new one.
        forwarder.cut()
        async with realtime_socket(bridge_port, "") as ws:
            await ws.send(
                {
                    "type": "session.resume",
                    "session_id": created["session"]["id"],
                    "resume_token": created["resume_token"],
                }
            )
            # The relay keeps trying, and the client hears nothing meanwhile.
            with_no_word = asyncio.create_task(ws.recv(wait_s=1.5))
            await asyncio.wait({with_no_word})
            assert isinstance(with_no_word.exception(), TimeoutError), with_no_word
            assert forwarder.reset >= 1  # the bridge did try, and was reset
            forwarder.resetting = False
            resumed = await ws.recv(wait_s=relay.ELSEWHERE_ATTEMPTS * 0.5)
            assert resumed["type"] == "session.resumed", resumed
            assert resumed["session"]["id"] == created["session"]["id"]


async def test_a_new_session_lost_in_the_transport_is_not_opened_again() -> None:
    """Opening twice could leave two sessions: the client is told, and opens again itself."""
    async with bridge_through_forwarder() as (forwarder, bridge_port):
        forwarder.cut()
        async with realtime_socket(bridge_port, WITH_EXTENSIONS) as ws:
            # At once: tries again would take ELSEWHERE_ATTEMPTS * TRANSPORT_RETRY_S (10 s).
            refused = await ws.recv(wait_s=5.0)
            assert refused["type"] == "error", refused
            assert refused["error"]["code"] == "service_unavailable", refused
            assert await ws.closed() == (1012, "service_unavailable")
        assert forwarder.reset >= 1
