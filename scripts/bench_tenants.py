#!/usr/bin/env python3
"""Benchmark: noisy neighbours. One key attacks while another key holds a paced session.

For each attack of issue 26 (and a plain flood of appends), a fresh ``omni-grpc serve --engine
loopback --api-key key-a --api-key key-b`` runs as a child; key A attacks from a process of its
own, and meanwhile key B (this process) mints a client secret, opens a websocket session with it
and keeps it busy for the run: every 20 ms an ``input_audio_buffer.append`` of 20 ms of audio and
a ``session.heartbeat``, timing each heartbeat's answer (its round trip). The same victim runs
once with no attack first. Printed per attack: the victim's round trip p50/p99 against the
unloaded run, its refusals (a refused mint or open, an error event, a closed socket), and the
server's peak memory (``VmHWM``, from when the attack starts) against its budget.

The attacks (key A, unless said):

* ``keyless-watch``: health watches without any key, held open (the probe held 1100);
* ``silent-streams``: Converse calls that never send a first message, opened again as they end;
* ``sessions``: as many sessions as it may open, held with heartbeats;
* ``client-secrets``: two-hour client secrets minted as fast as the bridge answers;
* ``frame-flood``: websockets each sending three appends of a large base64 frame, input held;
* ``append-flood``: websockets sending plain 20 ms appends as fast as their sockets take them;
* ``many-streams``: ConverseMany batches, without a key, each naming 200,000 new streams;
* ``recording-flood``: with ``--record all``, websockets sending 1 MiB of audio a second, each
  append cleared at once (the recorder lays audio sent faster than real time ahead of the clock);
* ``echo-flood``: websockets that never read, sending unknown ``type`` values of 1 MiB of quotes
  (an error that echoed them escaped was three times their size);
* ``slow-bodies``: HTTP requests to mint a client secret that send one byte of their body;
* ``event-id-echo``: gRPC sessions whose refused commands carry a 5 MiB ``event_id``;
* ``h2-rapid-reset``, ``h2-continuation``, ``h2-metadata``: raw HTTP/2 on the gRPC port, with no
  key (scripts/h2_attacks.py): streams opened and reset at once in batches, a header block that
  never ends, and calls with 3,000 metadata entries each.

    scripts/bench_tenants.py            # the issue's sizes: 1 GiB budget, 60 x 3 frames of 15 MiB
    scripts/bench_tenants.py --quick    # a smoke run: small sizes, 3 s each
    scripts/bench_tenants.py --json     # the table as one JSON document on stdout
    scripts/bench_tenants.py --only frame-flood --frame-mib 14.9   # frames just under the cap

Figures of record need a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import aiohttp
import grpc
import orjson
from grpc_health.v1 import health_pb2, health_pb2_grpc

SELF = os.path.abspath(__file__)
ROOT = os.path.join(os.path.dirname(SELF), "..")
sys.path.insert(0, ROOT)

import h2_attacks  # noqa: E402  (beside this script)

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc  # noqa: E402
from omni_grpc.wire import pb  # noqa: E402
from omni_grpc.wire.keys import bearer_metadata  # noqa: E402

A, B = "key-a", "key-b"
ATTACKS = (
    "keyless-watch",
    "silent-streams",
    "sessions",
    "client-secrets",
    "frame-flood",
    "append-flood",
    "many-streams",
    "recording-flood",
    "echo-flood",
    "slow-bodies",
    "event-id-echo",
    "h2-rapid-reset",
    "h2-continuation",
    "h2-metadata",
)
# What an attack needs of the server beyond the common flags ("{tmp}": a folder of the run).
SERVER_FLAGS = {"recording-flood": ("--record", "all", "--record-dir", "{tmp}")}
CHUNK_MS = 20
CHUNK = b"\x00\x08" * (24 * CHUNK_MS)  # 20 ms of pcm16 at 24 kHz, OpenAI's default input
NO_TURN_DETECTION = {
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}


@dataclass(frozen=True)
class Sizes:
    """How big the run is: the issue's sizes, or a smoke run's."""

    seconds: float = 10.0
    budget_mib: int = 1024
    watches: int = 1100
    silent_streams: int = 1024
    flood_sockets: int = 60
    frame_mib: float = 15.0
    append_sockets: int = 20
    batch_streams: int = 200_000
    recorded_sockets: int = 4
    echo_sockets: int = 20
    slow_bodies: int = 500
    h2_connections: int = 16


QUICK = Sizes(
    seconds=3.0,
    budget_mib=128,
    watches=200,
    silent_streams=200,
    flood_sockets=12,
    frame_mib=4.0,
    append_sockets=4,
    batch_streams=20_000,
    recorded_sockets=2,
    echo_sockets=4,
    slow_bodies=100,
    h2_connections=4,
)


@dataclass
class Result:
    attack: str
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    answered: int = 0
    refusals: list[str] = field(default_factory=list)
    peak_mib: float = 0.0
    baseline_mib: float = 0.0
    budget_mib: int = 0


# -- the server under test --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def status_kib(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return 0


def reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")


@contextlib.asynccontextmanager
async def server(sizes: Sizes, flags: tuple[str, ...] = ()) -> Any:
    grpc_port, http_port, metrics_port = free_port(), free_port(), free_port()
    scratch = tempfile.TemporaryDirectory(prefix="bench-tenants-")
    command = [sys.executable, "-m", "omni_cli", "serve", "--engine", "loopback"]
    command += [flag.format(tmp=scratch.name) for flag in flags]
    command += ["--engine-option", "pace=fast", "--api-key", A, "--api-key", B]
    command += ["--grpc-port", str(grpc_port), "--http-port", str(http_port)]
    command += ["--metrics-port", str(metrics_port), "--memory-budget-mib", str(sizes.budget_mib)]
    child = await asyncio.create_subprocess_exec(
        *command, "--log-level", "error", cwd=ROOT, stdout=asyncio.subprocess.DEVNULL
    )
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(1200):
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{metrics_port}/health") as response:
                        if response.status == 200:
                            break
                if child.returncode is not None:
                    raise SystemExit("the server ended while starting")
                await asyncio.sleep(0.1)
        yield child.pid, grpc_port, http_port
    finally:
        child.terminate()
        await child.wait()
        scratch.cleanup()


# -- the victim: key B, a paced session -------------------------------------------------------


async def victim(http_port: int, seconds: float, result: Result) -> None:
    """Mints a secret, opens a session with it, and paces 20 ms chunks and heartbeats."""
    base = f"http://127.0.0.1:{http_port}"
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{base}/v1/realtime/client_secrets", headers={"Authorization": f"Bearer {B}"}
        ) as response:
            if response.status != 200:
                result.refusals.append(f"mint {response.status}")
                return
            secret = (await response.json())["value"]
        protocols = ("realtime", f"openai-insecure-api-key.{secret}")
        try:
            ws = await http.ws_connect(
                f"{base}/v1/realtime?model=bench&extensions=1", protocols=protocols
            )
        except aiohttp.WSServerHandshakeError as refused:
            result.refusals.append(f"open {refused.status}")
            return
        async with ws:
            created = orjson.loads((await ws.receive()).data)
            if created["type"] != "session.created":
                result.refusals.append(f"open {created.get('error', {}).get('code')}")
                return
            await paced(ws, seconds, result)


async def paced(ws: aiohttp.ClientWebSocketResponse, seconds: float, result: Result) -> None:
    sent: list[float] = []
    rtts: list[float] = []

    async def read() -> None:
        async for message in ws:
            if message.type is not aiohttp.WSMsgType.TEXT:
                break
            event = orjson.loads(message.data)
            kind = event["type"]
            if kind == "session.heartbeat_ack" and len(rtts) < len(sent):
                rtts.append(time.monotonic() - sent[len(rtts)])
            elif kind == "error":
                result.refusals.append(event["error"].get("code", "error"))

    reader = asyncio.create_task(read())
    append = orjson.dumps(
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(CHUNK).decode()}
    ).decode()
    start = time.monotonic()
    for n in range(int(seconds * 1000 / CHUNK_MS)):
        await asyncio.sleep(max(start + n * CHUNK_MS / 1000 - time.monotonic(), 0))
        await ws.send_str(append)
        if n % 100 == 99:  # a turn's worth: the input is let go
            await ws.send_str('{"type":"input_audio_buffer.clear"}')
        sent.append(time.monotonic())
        await ws.send_str('{"type":"session.heartbeat"}')
    await asyncio.sleep(1.0)  # the last answers
    reader.cancel()
    if ws.closed:
        result.refusals.append(f"closed {ws.close_code}")
    result.answered = len(rtts)
    if len(rtts) < len(sent):
        result.refusals.append(f"{len(sent) - len(rtts)} heartbeats unanswered")
    if rtts:
        ordered = sorted(rtts)
        result.p50_ms = 1000 * statistics.median(ordered)
        result.p99_ms = 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


# -- the attacks: key A (or no key), in a process of their own ---------------------------------


async def keyless_watch(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") for _ in range(12)]

    async def hold(n: int) -> None:
        stub = health_pb2_grpc.HealthStub(channels[n % len(channels)])
        while True:  # held as long as the server lets it; watched again when it ends
            with contextlib.suppress(grpc.aio.AioRpcError):
                async for _ in stub.Watch(health_pb2.HealthCheckRequest()):
                    pass
            await asyncio.sleep(0.1)

    await asyncio.gather(*(hold(n) for n in range(sizes.watches)))


async def silent_streams(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}")
    stub = duplex_pb2_grpc.DuplexServiceStub(channel)

    async def hold() -> None:
        while True:  # a stream that says nothing, opened again when it is closed
            call = stub.Converse(metadata=bearer_metadata(A))
            with contextlib.suppress(grpc.aio.AioRpcError):
                await call.code()
            await asyncio.sleep(0.05)

    await asyncio.gather(*(hold() for _ in range(sizes.silent_streams)))


async def sessions(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}")
    stub = duplex_pb2_grpc.DuplexServiceStub(channel)

    async def hold() -> None:
        while True:
            call = stub.Converse(metadata=bearer_metadata(A))
            try:
                await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
                await call.read()
                for seq in range(1, 1_000_000):  # held with heartbeats
                    await asyncio.sleep(5.0)
                    await call.write(pb.ConverseRequest(client_seq=seq, heartbeat=pb.Heartbeat()))
            except grpc.aio.AioRpcError:
                await asyncio.sleep(1.0)  # refused: try again, as a patient attacker does

    await asyncio.gather(*(hold() for _ in range(100)))


async def client_secrets(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    url = f"http://127.0.0.1:{http_port}/v1/realtime/client_secrets"
    headers = {"Authorization": f"Bearer {A}"}
    body = {"expires_after": {"seconds": 7200}}
    async with aiohttp.ClientSession() as http:

        async def mint() -> None:
            while True:
                async with http.post(url, headers=headers, json=body) as response:
                    await response.read()

        await asyncio.gather(*(mint() for _ in range(8)))


async def realtime(http: aiohttp.ClientSession, http_port: int) -> Any:
    ws = await http.ws_connect(
        f"http://127.0.0.1:{http_port}/v1/realtime?model=flood",
        headers={"Authorization": f"Bearer {A}"},
        max_msg_size=0,
    )
    await ws.receive()  # session.created
    return ws


async def drain(ws: aiohttp.ClientWebSocketResponse) -> None:
    async for _ in ws:
        pass


async def frame_flood(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    raw = int(sizes.frame_mib * 1024 * 1024 * 3 / 4) // 2 * 2
    audio = base64.b64encode(b"\x00\x08" * (raw // 2)).decode()
    frame = orjson.dumps({"type": "input_audio_buffer.append", "audio": audio}).decode()
    async with aiohttp.ClientSession() as http:

        async def one() -> None:
            with contextlib.suppress(aiohttp.ClientError, ConnectionError):
                ws = await realtime(http, http_port)
                reader = asyncio.create_task(drain(ws))
                await ws.send_str(orjson.dumps(NO_TURN_DETECTION).decode())
                for _ in range(3):
                    await ws.send_str(frame)
                await reader

        await asyncio.gather(*(one() for _ in range(sizes.flood_sockets)))


async def append_flood(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    append = orjson.dumps(
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(CHUNK).decode()}
    ).decode()
    async with aiohttp.ClientSession() as http:

        async def one() -> None:
            with contextlib.suppress(aiohttp.ClientError, ConnectionError):
                ws = await realtime(http, http_port)
                reader = asyncio.create_task(drain(ws))
                while not ws.closed:
                    await ws.send_str(append)  # as fast as the socket takes it
                await reader

        await asyncio.gather(*(one() for _ in range(sizes.append_sockets)))


async def many_streams(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    open_ = pb.ConverseRequest(open_session=pb.OpenSession())
    batch = pb.ConverseManyRequest(
        requests=[pb.StreamRequest(stream_id=n, request=open_) for n in range(sizes.batch_streams)]
    ).SerializeToString()
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}", options=options) as channel:
        method = channel.stream_stream(
            "/omni.duplex.v1.DuplexService/ConverseMany",
            request_serializer=None,
            response_deserializer=None,
        )
        while True:  # a batch, then another once the call is ended
            call = method()
            with contextlib.suppress(grpc.aio.AioRpcError):
                await call.write(batch)
                while await call.read() is not grpc.aio.EOF:  # type: ignore[attr-defined]
                    pass
            await asyncio.sleep(0.1)


async def recording_flood(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    chunk = base64.b64encode(b"\x00\x08" * (32 * 1024)).decode()  # 64 KiB of audio
    append = orjson.dumps({"type": "input_audio_buffer.append", "audio": chunk}).decode()
    async with aiohttp.ClientSession() as http:

        async def one() -> None:
            with contextlib.suppress(aiohttp.ClientError, ConnectionError):
                ws = await realtime(http, http_port)
                reader = asyncio.create_task(drain(ws))
                await ws.send_str(orjson.dumps(NO_TURN_DETECTION).decode())
                while not ws.closed:  # 1 MiB a second, each append let go at once
                    for _ in range(16):
                        await ws.send_str(append)
                        await ws.send_str('{"type":"input_audio_buffer.clear"}')
                    await asyncio.sleep(1.0)
                await reader

        await asyncio.gather(*(one() for _ in range(sizes.recorded_sockets)))


async def echo_flood(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    frame = orjson.dumps({"type": "'" * (1024 * 1024), "event_id": "'" * 1024}).decode()
    async with aiohttp.ClientSession() as http:

        async def one() -> None:
            with contextlib.suppress(aiohttp.ClientError, ConnectionError):
                ws = await realtime(http, http_port)
                while not ws.closed:  # never read: the errors pile up at the server
                    await ws.send_str(frame)

        await asyncio.gather(*(one() for _ in range(sizes.echo_sockets)))


async def slow_bodies(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    head = (
        "POST /v1/realtime/client_secrets HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {A}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n{"
    ).encode()

    async def one() -> None:
        while True:  # one byte of a hundred, then held until the server lets go
            with contextlib.suppress(OSError):
                reader, writer = await asyncio.open_connection("127.0.0.1", http_port)
                writer.write(head)
                await writer.drain()
                await reader.read()
                writer.close()
            await asyncio.sleep(0.1)

    await asyncio.gather(*(one() for _ in range(sizes.slow_bodies)))


async def event_id_echo(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    options = [("grpc.max_send_message_length", 32 * 1024 * 1024)]
    options.append(("grpc.max_receive_message_length", 32 * 1024 * 1024))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}", options=options) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)

        async def one() -> None:
            while True:
                call = stub.Converse(metadata=bearer_metadata(A))
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
                    await call.read()
                    for seq in range(1, 1_000_000):  # a commit of nothing: refused, echoed
                        commit = pb.CommitInputAudio()
                        request = pb.ConverseRequest(
                            client_seq=seq,
                            event_id="e" * (5 * 1024 * 1024),
                            commit_input_audio=commit,
                        )
                        await call.write(request)
                        await call.read()
                await asyncio.sleep(0.5)

        await asyncio.gather(*(one() for _ in range(4)))


async def h2_rapid_reset(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    await h2_attacks.rapid_reset("127.0.0.1", grpc_port, sizes.h2_connections)


async def h2_continuation(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    await h2_attacks.continuation_flood("127.0.0.1", grpc_port, sizes.h2_connections)


async def h2_metadata(grpc_port: int, http_port: int, sizes: Sizes) -> None:
    await h2_attacks.metadata_flood("127.0.0.1", grpc_port, sizes.h2_connections)


RUN: dict[str, Callable[[int, int, Sizes], Awaitable[None]]] = {
    "keyless-watch": keyless_watch,
    "silent-streams": silent_streams,
    "sessions": sessions,
    "client-secrets": client_secrets,
    "frame-flood": frame_flood,
    "append-flood": append_flood,
    "many-streams": many_streams,
    "recording-flood": recording_flood,
    "echo-flood": echo_flood,
    "slow-bodies": slow_bodies,
    "event-id-echo": event_id_echo,
    "h2-rapid-reset": h2_rapid_reset,
    "h2-continuation": h2_continuation,
    "h2-metadata": h2_metadata,
}


# -- a run ------------------------------------------------------------------------------------


async def measure(attack: str | None, sizes: Sizes, quick: bool) -> Result:
    result = Result(attack or "none", budget_mib=sizes.budget_mib)
    async with server(sizes, SERVER_FLAGS.get(attack or "", ())) as (pid, grpc_port, http_port):
        attacker = None
        reset_peak(pid)
        result.baseline_mib = status_kib(pid, "VmRSS") / 1024
        if attack is not None:
            command = [sys.executable, SELF, "--attack", attack, "--grpc-port", str(grpc_port)]
            command += ["--http-port", str(http_port), *(["--quick"] if quick else [])]
            command += ["--frame-mib", str(sizes.frame_mib)]
            attacker = await asyncio.create_subprocess_exec(*command, cwd=ROOT)
            await asyncio.sleep(1.0 if quick else 3.0)  # the attack takes hold
        try:
            await victim(http_port, sizes.seconds, result)
        finally:
            result.peak_mib = status_kib(pid, "VmHWM") / 1024
            if attacker is not None:
                attacker.terminate()
                await attacker.wait()
    return result


def table(results: list[Result]) -> str:
    unloaded = results[0].p99_ms or 1.0
    lines = [
        "| attack | victim p50 ms | victim p99 ms | p99 / unloaded | victim refusals "
        "| server peak MiB (growth) | budget MiB |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for r in results:
        refusals = ", ".join(r.refusals) or "none"
        growth = r.peak_mib - r.baseline_mib
        lines.append(
            f"| {r.attack} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.p99_ms / unloaded:.1f}x "
            f"| {refusals} | {r.peak_mib:.0f} ({growth:+.0f}) | {r.budget_mib} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: small sizes, 3 s each")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--only", choices=ATTACKS, action="append", help="these attacks only")
    parser.add_argument(
        "--frame-mib",
        type=float,
        help="the frame flood's frames, in MiB of base64 (15 by default: just over the 15 MiB "
        "event cap, so refused for size; 14.9 is taken, parsed and decoded)",
    )
    parser.add_argument("--attack", choices=ATTACKS, help=argparse.SUPPRESS)  # the attacker
    parser.add_argument("--grpc-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--http-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = QUICK if args.quick else Sizes()
    if args.frame_mib is not None:
        sizes = replace(sizes, frame_mib=args.frame_mib)
    if args.attack:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(RUN[args.attack](args.grpc_port, args.http_port, sizes))
        return
    results = []
    for attack in (None, *(args.only or ATTACKS)):
        results.append(asyncio.run(measure(attack, sizes, args.quick)))
        print(f"{results[-1].attack}: done", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(table(results))


if __name__ == "__main__":
    main()
