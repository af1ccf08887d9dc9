"""Connections to the gRPC port that never do anything are closed on time.

A TCP connection that never sends the HTTP/2 preface is closed at the handshake timeout, and
one that finished its set-up but never starts a call at the idle timeout; tests use short ones.
"""

from __future__ import annotations

import asyncio
import socket
import time

from tests.serving import serving, settings

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = bytes.fromhex("000000040000000000")  # a SETTINGS frame with no settings
TIMEOUT_S = 0.5


async def seconds_until_closed(port: int, first_bytes: bytes, bound_s: float) -> float:
    """Connects, sends ``first_bytes``, and times how long until the server closes."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()  # before the connection: the server's timer starts at accept
    with socket.socket() as sock:
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        if first_bytes:
            await loop.sock_sendall(sock, first_bytes)
        async with asyncio.timeout(bound_s):
            while await loop.sock_recv(sock, 65536):
                pass  # the server's SETTINGS and GOAWAY
        return time.monotonic() - started


async def test_silent_and_idle_connections_are_closed() -> None:
    quick = settings(handshake_timeout_s=TIMEOUT_S, max_connection_idle_s=TIMEOUT_S)
    async with serving(quick) as running:
        silent = [seconds_until_closed(running.grpc_port, b"", bound_s=5.0) for _ in range(20)]
        idle = seconds_until_closed(running.grpc_port, PREFACE + EMPTY_SETTINGS, bound_s=5.0)
        *silent_s, idle_s = await asyncio.gather(*silent, idle)
    assert all(TIMEOUT_S * 0.8 <= s < TIMEOUT_S + 2.0 for s in silent_s), silent_s
    # gRPC adds up to 10 % jitter to the idle timeout.
    assert TIMEOUT_S * 0.8 <= idle_s < TIMEOUT_S + 2.0, idle_s
