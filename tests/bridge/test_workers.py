"""``omni-grpc serve --bridge-workers 2``: two processes take the websockets of one port, each
carrying sessions, and both stop on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import orjson

CLI = str(Path(sys.executable).parent / "omni-grpc")
SOCKETS = 24  # enough that the kernel's spreading by address hash reaches both processes


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _tcp_on_port(port: int, state: str) -> dict[str, str]:
    """Inode -> local address of every IPv4 TCP socket on ``port`` in ``state`` (hex code)."""
    found = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, socket_state, inode = fields[1], fields[3], fields[9]
        if int(local.split(":")[1], 16) == port and socket_state == state:
            found[inode] = local
    return found


LISTEN, ESTABLISHED = "0A", "01"


async def test_two_processes_share_the_port_and_both_carry_sessions() -> None:
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
        str(_free_port()),
        "--bridge-workers",
        "2",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert server.stdout is not None
        banner = await asyncio.wait_for(server.stdout.readline(), 30)
        found = re.search(rb"websocket bridge on http://[\d.]+:(\d+)/", banner)
        assert found, banner
        port = int(found.group(1))
        # The banner comes only once both processes listen (the worker's start is waited for).
        assert len(_tcp_on_port(port, LISTEN)) == 2
        # multiprocessing's spawned worker (its resource tracker is a child too).
        (worker,) = [pid for pid in _children(server.pid) if "spawn_main" in _cmdline(pid)]
        url = f"http://127.0.0.1:{port}/v1/realtime?model=loopback-test"
        async with aiohttp.ClientSession() as http:
            sockets = [await http.ws_connect(url) for _ in range(SOCKETS)]
            for ws in sockets:
                first = orjson.loads((await ws.receive(timeout=30)).data)
                assert first["type"] == "session.created"
            established = _tcp_on_port(port, ESTABLISHED)
            by_parent = established.keys() & _socket_inodes(server.pid)
            by_worker = established.keys() & _socket_inodes(worker)
            assert by_parent and by_worker, (len(by_parent), len(by_worker))
            assert len(by_parent) + len(by_worker) == SOCKETS
            for ws in sockets:
                await ws.close()
        server.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(server.wait(), 30) == 0
        assert _gone(worker)
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except FileNotFoundError:
        return ""


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
