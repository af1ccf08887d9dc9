"""A TCP proxy on 127.0.0.1 that breaks connections on purpose, for resume and chaos tests.

:class:`ChaosProxy` forwards every accepted connection to one upstream address and can, on
demand, cut them: all at once (:meth:`ChaosProxy.cut_all`), after exactly N more bytes have
passed (:meth:`ChaosProxy.cut_after_bytes`, which lands cuts in the middle of HTTP/2 frames), at
random byte counts (:meth:`ChaosProxy.cut_randomly`) or at random times
(:meth:`ChaosProxy.start_random_cuts`), both drawn from one seeded RNG so a failing run can be
replayed. :attr:`ChaosProxy.refuse` makes it accept and drop new connections at once, which
looks like a server that is gone while the port stays open, and :meth:`ChaosProxy.stall` holds
one direction's bytes back (a hung path: nothing arrives, nothing fails). A cut closes both
sockets with a TCP reset, as a crash or a dropped NAT entry would.

    async with ChaosProxy("127.0.0.1", server_port, seed=7) as proxy:
        client = await DuplexClient.connect(proxy.target)
        ...
        proxy.cut_all()
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from dataclasses import dataclass

_READ_SIZE = 64 * 1024


@dataclass(slots=True)
class ProxyStats:
    """What passed through the proxy so far."""

    connections: int = 0
    refused: int = 0
    cuts: int = 0  # connections cut (not cut events)
    bytes_up: int = 0  # client to server
    bytes_down: int = 0  # server to client


def _reset(writer: asyncio.StreamWriter) -> None:
    """Closes with a TCP reset (linger 0), as a crashed peer or a dropped NAT entry would."""
    sock = writer.get_extra_info("socket")
    if sock is not None and not writer.transport.is_closing():
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Link:
    """One proxied connection: the two socket pairs and the two pump tasks."""

    __slots__ = ("client", "upstream", "tasks")

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            _reset(writer)
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()


class ChaosProxy:
    """Forwards 127.0.0.1:``port`` to ``upstream_host:upstream_port`` and cuts on demand."""

    def __init__(self, upstream_host: str, upstream_port: int, *, seed: int = 0) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.rng = random.Random(seed)
        self.stats = ProxyStats()
        self.refuse = False
        self.port = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._budget: int | None = None  # bytes still allowed before the armed cut
        self._budget_direction = "both"
        self._random_mean_bytes: int | None = None
        self._timer: asyncio.Task[None] | None = None
        self._flowing = {"up": asyncio.Event(), "down": asyncio.Event()}
        for flowing in self._flowing.values():
            flowing.set()

    @property
    def target(self) -> str:
        """The address clients connect to, as "127.0.0.1:port"."""
        return f"127.0.0.1:{self.port}"

    @property
    def open_connections(self) -> int:
        """How many proxied connections are up now."""
        return len(self._links)

    async def start(self) -> ChaosProxy:
        """Starts listening on a free port of 127.0.0.1."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Stops listening and cuts everything."""
        await self.stop_random_cuts()
        if self._server is not None:
            self._server.close()
        self.cut_all()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> ChaosProxy:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- cutting ---------------------------------------------------------------------------

    def cut_all(self) -> int:
        """Aborts every open connection now; returns how many were cut."""
        links = list(self._links)
        for link in links:
            link.abort()
        self._links.clear()
        self.stats.cuts += len(links)
        return len(links)

    def cut_after_bytes(self, n: int, *, direction: str = "both") -> None:
        """Lets exactly ``n`` more bytes through (all connections; ``direction`` "up" counts
        only client-to-server bytes, "down" only server-to-client, "both" either), then cuts
        every connection. One shot: it disarms after the cut."""
        if n < 0:
            raise ValueError("n must not be negative")
        if direction not in ("both", "up", "down"):
            raise ValueError("direction must be 'both', 'up' or 'down'")
        self._random_mean_bytes = None
        self._budget_direction = direction
        self._budget = n

    def stall(self, direction: str = "both") -> None:
        """Holds back bytes going ``direction`` ("up", "down" or "both") until
        :meth:`unstall`; held bytes are lost if the connection is cut meanwhile."""
        for name in self._directions(direction):
            self._flowing[name].clear()

    def unstall(self, direction: str = "both") -> None:
        """Lets held-back bytes flow again."""
        for name in self._directions(direction):
            self._flowing[name].set()

    @staticmethod
    def _directions(direction: str) -> tuple[str, ...]:
        if direction not in ("both", "up", "down"):
            raise ValueError("direction must be 'both', 'up' or 'down'")
        return ("up", "down") if direction == "both" else (direction,)

    def cut_randomly(self, mean_bytes: int | None) -> None:
        """Cuts every connection after a random number of bytes (exponential, mean
        ``mean_bytes``), again and again; None stops it."""
        self._random_mean_bytes = mean_bytes
        self._budget_direction = "both"
        self._budget = None if mean_bytes is None else self._draw_budget()

    def start_random_cuts(self, min_interval_s: float, max_interval_s: float) -> None:
        """Cuts every connection at random intervals in [min, max] seconds until stopped."""
        if not 0 < min_interval_s <= max_interval_s:
            raise ValueError("need 0 < min_interval_s <= max_interval_s")
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.create_task(self._cut_periodically(min_interval_s, max_interval_s))

    async def stop_random_cuts(self) -> None:
        """Stops :meth:`start_random_cuts`."""
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None

    async def _cut_periodically(self, low: float, high: float) -> None:
        while True:
            await asyncio.sleep(self.rng.uniform(low, high))
            self.cut_all()

    def _draw_budget(self) -> int:
        assert self._random_mean_bytes is not None
        return max(1, int(self.rng.expovariate(1 / self._random_mean_bytes)))

    # -- forwarding ------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        if self.refuse:
            self.stats.refused += 1
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(
                self.upstream_host, self.upstream_port
            )
        except OSError:
            _reset(writer)
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._pump(reader, up_writer, link, up=True)),
            asyncio.create_task(self._pump(up_reader, writer, link, up=False)),
        ]
        try:
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            self._links.discard(link)
            link.abort()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link, *, up: bool
    ) -> None:
        try:
            while data := await reader.read(_READ_SIZE):
                counted = self._budget is not None and self._budget_direction in (
                    "both",
                    "up" if up else "down",
                )
                if counted and self._budget is not None and len(data) >= self._budget:
                    head, self._budget = data[: self._budget], None
                    await self._forward(writer, head, up=up)
                    self._budget = (
                        self._draw_budget() if self._random_mean_bytes is not None else None
                    )
                    self.cut_all()
                    return
                if counted and self._budget is not None:
                    self._budget -= len(data)
                await self._forward(writer, data, up=up)
        except (ConnectionError, OSError):
            pass
        finally:
            # One side finished or failed: the connection is over for both.
            link.abort()

    async def _forward(self, writer: asyncio.StreamWriter, data: bytes, *, up: bool) -> None:
        if not data:
            return
        await self._flowing["up" if up else "down"].wait()
        writer.write(data)
        if up:
            self.stats.bytes_up += len(data)
        else:
            self.stats.bytes_down += len(data)
        await writer.drain()
