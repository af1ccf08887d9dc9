#!/usr/bin/env python3
"""Benchmark: what large appends cost the server's memory, and what its budget lets through.

The service (loopback engine) runs in a child process; the parent opens sessions that each
append one large chunk of pcm16 at 24 kHz (the OpenAI dialect's default format) and keep it
uncommitted, and prints the server's resident memory before and after, and how many appends the
memory budget refused, and the RSS once the sessions have ended.

scripts/bench_memory.py                          # 8 sessions x 10 MiB, default budget
scripts/bench_memory.py --sessions 16 --mib 10 --budget-mib 64
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import grpc

from omni_grpc.bench import harness
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_OUTPUT_RATE_HZ

CLIENT_RATE_HZ = CANONICAL_OUTPUT_RATE_HZ  # 24 kHz: the rate OpenAI clients send in too
SELF = os.path.abspath(__file__)
SETTLE_S = 1.0  # lets the server's allocator return what it freed before RSS is read


async def serve(budget_mib: int) -> None:
    """The child: the loopback service with a budget of ``budget_mib``, until the parent goes."""
    from omni_grpc.core import Limits
    from omni_grpc.server.app import start_server
    from omni_grpc.server.settings import ServerSettings

    limits = Limits(memory_budget_bytes=budget_mib * 1024 * 1024) if budget_mib else Limits()
    running = await start_server(ServerSettings(grpc_port=0, engine="loopback", limits=limits))
    harness.announce_ready(running.grpc_port)
    await harness.serve_until_parent_gone()
    await running.stop()


async def append_one(stub: object, audio: bytes) -> tuple[grpc.aio.StreamStreamCall, str]:
    """Opens a session, appends ``audio`` uncommitted; returns the call and any error code."""
    call = stub.Converse()  # type: ignore[attr-defined]
    config = pb.SessionConfig(turn_detection=pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_NONE))
    await call.write(pb.ConverseRequest(open_session=pb.OpenSession(config=config)))
    await call.read()
    append = pb.AppendInputAudio(
        audio=audio, encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=CLIENT_RATE_HZ
    )
    await call.write(pb.ConverseRequest(client_seq=1, append_input_audio=append))
    await call.write(pb.ConverseRequest(client_seq=2, heartbeat=pb.Heartbeat()))
    code = ""
    while (event := await call.read()).WhichOneof("event") != "heartbeat_ack":
        if event.WhichOneof("event") == "error":
            code = event.error.code
    return call, code


async def bench(sessions: int, mib: int, budget_mib: int) -> int:
    from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc

    child = harness.Child([sys.executable, SELF, f"--budget-mib={budget_mib}"], "loopback")
    audio = bytes(mib * 1024 * 1024)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{child.ports[0]}") as channel:
            stub = duplex_pb2_grpc.DuplexServiceStub(channel)
            await asyncio.sleep(SETTLE_S)
            before = harness.rss_kib(child.pid)
            results = [await append_one(stub, audio) for _ in range(sessions)]
            await asyncio.sleep(SETTLE_S)
            after = harness.rss_kib(child.pid)
            for call, _ in results:  # the sessions end, and what they held goes back
                await call.write(pb.ConverseRequest(client_seq=3, close_session=pb.CloseSession()))
                while await call.read() != grpc.aio.EOF:
                    pass
            await asyncio.sleep(SETTLE_S)
            ended = harness.rss_kib(child.pid)
    finally:
        child.stop()
    refused = sum(1 for _, code in results if code)
    codes = sorted({code for _, code in results if code})
    budget = f"{budget_mib} MiB" if budget_mib else "default"
    harness.print_table(
        [
            "sessions x append",
            "budget",
            "refused",
            "RSS before",
            "RSS after",
            "per session",
            "ended",
        ],
        [
            [
                f"{sessions} x {mib} MiB",
                budget,
                f"{refused} {' '.join(codes)}".strip(),
                f"{before / 1024:.0f} MB",
                f"{after / 1024:.0f} MB",
                f"{(after - before) / 1024 / sessions:.1f} MB",
                f"{ended / 1024:.0f} MB",
            ]
        ],
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--mib", type=int, default=10, help="size of each append, MiB")
    parser.add_argument("--budget-mib", type=int, default=0, help="server budget (0: default)")
    parser.add_argument("--serve-loopback", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_loopback:
        return harness.run(serve(args.budget_mib))
    return harness.run(bench(args.sessions, args.mib, args.budget_mib))


if __name__ == "__main__":
    sys.exit(main())
