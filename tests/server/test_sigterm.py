"""SIGTERM on a real ``omni-grpc serve`` process: sessions are told to go, then it stops."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path

import grpc
import pytest

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from tests.server.streams import open_stream, read

# It signals a server of its own, a child process.
pytestmark = pytest.mark.subprocess

CLI = str(Path(sys.executable).parent / "omni-grpc")


async def test_sigterm_warns_sessions_drains_and_exits_cleanly() -> None:
    server = await asyncio.create_subprocess_exec(
        CLI,
        "serve",
        "--engine",
        "loopback",
        "--engine-option",
        "pace=fast",
        "--grpc-port",
        "0",
        "--http-port",
        "0",
        "--shutdown-grace-s",
        "3",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert server.stdout is not None
        banner = await asyncio.wait_for(server.stdout.readline(), 30)
        found = re.search(rb"serving gRPC on ([\d.]+:\d+)", banner)
        assert found, banner
        async with grpc.aio.insecure_channel(found.group(1).decode()) as channel:
            stub = duplex_pb2_grpc.DuplexServiceStub(channel)
            call, _ = await open_stream(stub)
            server.send_signal(signal.SIGTERM)
            warned = await read(call)
            assert warned.WhichOneof("event") == "going_away"
            assert warned.going_away.reason == "shutdown"
            assert 0 < warned.going_away.time_left.ToMilliseconds() <= 3000
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await open_stream(stub)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            started = asyncio.get_running_loop().time()
            call.cancel()  # the client moves on; the server need not wait out its grace
            assert await asyncio.wait_for(server.wait(), 10) == 0
            assert asyncio.get_running_loop().time() - started < 2.5
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
