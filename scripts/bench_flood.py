#!/usr/bin/env python3
"""Benchmark: what one websocket that floods tiny events costs the service, and what it gets.

Starts `omni-grpc serve --engine loopback` (gRPC and bridge in one child process), connects one
websocket to the bridge and sends `session.heartbeat` as fast as the socket takes it for a few
seconds, reading every answer. Prints the answers per second by type, the retry hints seen, and
the child's CPU over the run. Extra arguments go to `omni-grpc serve`, e.g. the rate-limit flags:

scripts/bench_flood.py                                   # the default rate limits
scripts/bench_flood.py --session-commands-per-s 1e9      # as good as no limit
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import socket
import subprocess
import sys
import time

import aiohttp
import orjson

HEARTBEAT = '{"type":"session.heartbeat"}'
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of every thread of ``pid``, from /proc."""
    ticks = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def connect(http: aiohttp.ClientSession, port: int) -> aiohttp.ClientWebSocketResponse:
    for _ in range(150):  # the child needs a moment to listen
        try:
            return await http.ws_connect(f"http://127.0.0.1:{port}/v1/realtime?model=flood")
        except aiohttp.ClientConnectorError:
            await asyncio.sleep(0.2)
    raise SystemExit("the bridge never listened")


async def flood(pid: int, port: int, seconds: float) -> None:
    async with aiohttp.ClientSession() as http:
        ws = await connect(http, port)
        await ws.receive()  # session.created
        answers: collections.Counter[str] = collections.Counter()
        hints: set[int] = set()

        async def read() -> None:
            async for message in ws:
                event = orjson.loads(message.data)
                answers[event["type"]] += 1
                if event["type"] == "error":
                    hints.add(event["error"].get("retry_after_ms", 0))

        reader = asyncio.create_task(read())
        start, cpu_start, written = time.monotonic(), cpu_s(pid), 0
        stop = start + seconds
        while (left := stop - time.monotonic()) > 0:
            try:  # a socket pushed back stops taking frames: that is the point
                await asyncio.wait_for(ws.send_str(HEARTBEAT), left)
            except TimeoutError:
                break
            written += 1
            if written % 50 == 0:
                await asyncio.sleep(0)  # let the reader run
        await asyncio.sleep(1.0)  # answers in flight
        elapsed, cpu = time.monotonic() - start, cpu_s(pid) - cpu_start
        reader.cancel()
        rates = {kind: round(count / elapsed) for kind, count in sorted(answers.items())}
        print(f"frames written: {written} ({written / seconds:.0f}/s)")
        print(f"answers per second: {rates}")
        print(f"retry_after_ms seen: {sorted(hints)}")
        print(f"server CPU: {100 * cpu / elapsed:.0f}% of a core over {elapsed:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to flood")
    args, serve_args = parser.parse_known_args()
    grpc_port, http_port = free_port(), free_port()
    command = [sys.executable, "-m", "omni_cli", "serve", "--engine", "loopback"]
    command += ["--grpc-port", str(grpc_port), "--http-port", str(http_port)]
    child = subprocess.Popen([*command, "--log-level", "warning", *serve_args], cwd=ROOT)
    try:
        asyncio.run(flood(child.pid, http_port, args.seconds))
    finally:
        child.terminate()
        child.wait()


if __name__ == "__main__":
    main()
