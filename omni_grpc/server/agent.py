"""HAProxy's agent check: each replica tells the proxy how much room it has (``--agent-port``).

HAProxy connects to a replica's agent port every ``agent-inter`` and reads one line. The
replica answers with a weight, as a share of the weight the proxy gave the server: its free
places over its capacity (:func:`agent_reply`), and ``drain`` while it drains. With
``balance leastconn`` the proxy divides each server's streams by its weight, so new sessions
go to the replicas with room; a full replica keeps a weight of 1 %, so that when every replica
is full new sessions still spread by their streams (and wait in the emptier queues). A call
with ``x-omni-route`` still goes to its owner: ``use-server`` does not look at weights.
deploy/haproxy/haproxy.cfg.in and docs/deploy.md show the configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

# How long a reply may take to go out; HAProxy gives up on its own (``timeout check``).
REPLY_TIMEOUT_S = 2.0


def agent_reply(free: int, capacity: int, *, draining: bool = False) -> str:
    """The agent's line: ``ready`` and the share of free places (at least 1 %), or ``drain``.

    ``ready`` also lifts a ``drain`` an earlier life of the replica left on the proxy.
    """
    if draining:
        return "drain"
    share = max(1, round(100 * free / capacity)) if capacity > 0 else 100
    return f"ready {share}%"


async def start_agent(host: str, port: int, reply: Callable[[], str]) -> tuple[asyncio.Server, int]:
    """Answers HAProxy's agent checks on ``host:port`` (0 picks a port) with ``reply()``;
    returns the server and its port."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(reply().encode() + b"\n")
            async with asyncio.timeout(REPLY_TIMEOUT_S):
                await writer.drain()
        except (OSError, TimeoutError):
            pass  # the proxy went; it asks again at its next check
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    server = await asyncio.start_server(answer, host, port)
    bound = int(server.sockets[0].getsockname()[1])
    logger.info("agent check on %s:%d", host, bound)
    return server, bound


__all__ = ["agent_reply", "start_agent"]
