"""A real gRPC server on a free local port, for every test tier that needs a live service.

The server, client, chaos, bridge and embedded tests all start theirs here, with the loopback
engine at fast pace unless they say otherwise. :class:`FakeClock` is the clock a test moves by
hand: a server started with one measures every session deadline on it, so a test of grace or
expiry advances it and runs the expiry timer's step instead of sleeping.
:func:`self_signed_certificate` makes what a TLS test serves with.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from omni_grpc.core import Limits
from omni_grpc.server.app import RunningServer, start_server
from omni_grpc.server.settings import ServerSettings

FAST = {"pace": "fast"}


def settings(**overrides: object) -> ServerSettings:
    """Test settings: a free port, the loopback engine at fast pace, a 5 s disconnect grace."""
    base = ServerSettings(
        grpc_port=0,
        engine="loopback",
        engine_options=FAST,
        limits=Limits(disconnect_grace_s=5.0),
    )
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


class FakeClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextlib.asynccontextmanager
async def serving(
    server_settings: ServerSettings | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[RunningServer]:
    """A started server (``settings()`` unless given), stopped when the block ends."""
    running = await start_server(server_settings or settings(), clock=clock)
    try:
        yield running
    finally:
        await running.stop()


async def eventually(condition: Callable[[], bool], *, timeout_s: float = 5.0) -> None:
    """Waits until ``condition()`` holds: server state that no event announces."""
    async with asyncio.timeout(timeout_s):
        while True:  # polled: the state changes inside the server, with nothing to await
            if condition():
                return
            await asyncio.sleep(0.01)


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate (and its key) for 127.0.0.1 and localhost, made by openssl."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    names = ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
    subprocess.run(
        ["openssl", *request, *names, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key
