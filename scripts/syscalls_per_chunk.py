"""System calls per chunk of a paced gRPC server, ours against the raw echo, counted by strace.

The server runs as ``omni-grpc bench`` runs it (its child process, the loopback mirror, or the
raw grpc.aio echo with ``--echo``); ``--sessions`` paced clients send ``--chunks`` appends of
20 ms each, each answered before the next is due, with an acknowledgement every 50 events as
the benchmark's clients send. ``strace -c -f`` counts the server's system calls (all its
threads) while they do, and the count per chunk is printed by call. Counts, not times: strace
slows the server, but not what it asks of the kernel per chunk, so a change is read off one
run even on a loaded machine. Needs ``strace`` and leave to trace a child (``ptrace_scope``
0 or 1, as the same user):

    .venv/bin/python scripts/syscalls_per_chunk.py            # ours
    .venv/bin/python scripts/syscalls_per_chunk.py --echo     # the raw echo

Each wake-up of the event loop is an ``epoll_pwait``: work left for the loop's next turn
(a ``call_soon``) costs one more per chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import grpc

from omni_grpc.bench import harness
from omni_grpc.bench.grpc_load import CLIENT_RATE_HZ, ECHO_METHOD, append
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import pcm16_bytes

CHUNK_S = 0.02
ACK_EVERY = 50
SERVE_CHILD = [sys.executable, "-m", "omni_grpc.bench.service"]


async def _open(channel: grpc.aio.Channel, echo: bool) -> Any:
    if echo:
        return channel.stream_stream(ECHO_METHOD, None, None)(None)
    call = duplex_pb2_grpc.DuplexServiceStub(channel).Converse(None)
    await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
    await call.read()  # session_created
    return call


async def _paced(call: Any, echo: bool, chunks: int, start: float) -> int:
    audio = bytes(pcm16_bytes(int(CHUNK_S * 1000), CLIENT_RATE_HZ))
    answered = 0
    for seq in range(1, chunks + 1):
        await asyncio.sleep(max(0.0, start + seq * CHUNK_S - time.monotonic()))
        request = append(seq, audio)
        await call.write(request.SerializeToString() if echo else request)
        event = await call.read()
        answered += 1
        if not echo and seq % ACK_EVERY == 0:
            await call.write(pb.ConverseRequest(ack_events=pb.AckEvents(seq=event.seq)))
    return answered


async def count(echo: bool, sessions: int, chunks: int) -> tuple[int, dict[str, int]]:
    """Drives the paced sessions under strace; returns the chunks answered and the calls."""
    child = harness.Child(SERVE_CHILD, "echo" if echo else "ours")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{child.ports[0]}") as channel:
            calls = [await _open(channel, echo) for _ in range(sessions)]
            with tempfile.NamedTemporaryFile("w+", prefix="strace-") as summary:
                tracer = await asyncio.create_subprocess_exec(
                    "strace", "-c", "-f", "-p", str(child.pid), stderr=summary
                )
                await asyncio.sleep(1.0)  # attached to every thread
                start = time.monotonic()
                answered = await asyncio.gather(
                    *(
                        _paced(call, echo, chunks, start + n * CHUNK_S / sessions)
                        for n, call in enumerate(calls)
                    )
                )
                tracer.send_signal(signal.SIGINT)
                await tracer.wait()
                summary.seek(0)
                table = summary.read()
            for call in calls:
                call.cancel()
    finally:
        child.stop()
    return sum(answered), _calls(table)


def _calls(table: str) -> dict[str, int]:
    """The calls by name from strace's summary (its rows: time, seconds, usecs, calls,
    [errors,] name)."""
    calls = {}
    for line in table.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[3].isdigit() and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3])
    return calls


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--echo", action="store_true", help="the raw grpc.aio echo")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=250, help="per session")
    args = parser.parse_args(argv)
    answered, calls = asyncio.run(count(args.echo, args.sessions, args.chunks))
    print(f"{'echo' if args.echo else 'ours'}: {answered} chunks, {args.sessions} paced sessions")
    for name, number in sorted(calls.items(), key=lambda item: -item[1]):
        if number >= answered / 10:
            print(f"{number / answered:6.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
