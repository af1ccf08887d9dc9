"""Python calls per chunk on the service's hot path, counted by cProfile, in one process.

The gRPC transport's ``Converse`` (the real servicer, sessions, host, core, edge and the
loopback engine in mirror mode) is driven over a stand-in for grpc.aio's servicer context, so
what is counted is our Python per chunk and none of gRPC's: a session opens, then ``--chunks``
appends of 20 ms of pcm16 at 24 kHz (as the benchmark's clients send them) each come back as an
output audio delta, with an acknowledgement every 50 events, as ``omni-grpc bench`` paces them.
The count is deterministic (no clock in it), so a change's effect is read off one run:

    .venv/bin/python scripts/profile_chunk.py              # calls per chunk, and ours
    .venv/bin/python scripts/profile_chunk.py --top 40     # and the functions, by calls

``--transport local`` drives the in-process entry point (what ``omni-grpc serve``'s bridge
uses) instead of the gRPC servicer. ``--record`` records the session (``--record all``, into a
temporary folder): the count is then the event loop's calls, and the CPU time per chunk of the
whole process, the writer thread's included, is printed beside it (a figure of the machine,
unlike the count). ``--transport echo`` the raw echo of ``omni-grpc bench``
over the same stand-in (the harness's own calls). ``--transport bridge`` runs the service as
``omni-grpc serve`` does (the websocket bridge in its process, the loopback mirror) and a
Realtime client in a thread of its own, on a real socket: only the server's thread is
profiled, one ``input_audio_buffer.append`` frame sent at a time, each answered by one
``response.output_audio.delta`` frame, with a ``session.event_ack`` every 50 events as
``scripts/bench_bridge.py``'s clients send; ``--transport ws-echo`` is the raw aiohttp echo of
``scripts/bench_bridge.py`` driven the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import os
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
import uvloop

from omni_grpc.bench.grpc_load import CLIENT_RATE_HZ, append, mirror_settings
from omni_grpc.bench.ws_load import DELTA, append_frame
from omni_grpc.core import Registry
from omni_grpc.engine import create_engine
from omni_grpc.server.local import LocalService
from omni_grpc.server.recording import Recorder, RecordSettings
from omni_grpc.server.servicer import DuplexServicer
from omni_grpc.server.sessions import Sessions
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import pcm16_bytes

EOF = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs
ACK_EVERY = 50
CHUNK_MS = 20
OURS = tuple(os.sep + name + os.sep for name in ("omni_grpc", "bridge", "omni_cli"))


class Context:
    """What the servicer uses of grpc.aio's ServicerContext: ``read`` hands out the requests
    given at once (a client that always has its next chunk ready), ``write`` counts."""

    def __init__(self, requests: list[bytes], now: list[float]) -> None:
        self._requests = iter(requests)
        self._now = now
        self.written = 0
        self.done = asyncio.get_running_loop().create_future()

    async def read(self) -> bytes | object:
        await asyncio.sleep(0)  # a read waits for the network: other tasks run meanwhile
        request = next(self._requests, None)
        self._now[0] += CHUNK_MS / 1000
        if request is None:
            self.done.set_result(None)
            return await asyncio.Future()  # the client waits; the call is cancelled
        return request

    async def write(self, payload: bytes) -> None:
        self.written += 1

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def send_initial_metadata(self, metadata: object) -> None:
        return None

    async def abort(self, code: object, details: str = "", metadata: object = ()) -> None:
        raise RuntimeError(f"aborted: {code} {details}")


async def _echo(request_iterator: object, context: Context) -> None:
    """The raw echo of ``omni-grpc bench``: the harness's own calls per chunk."""
    while (message := await context.read()) is not EOF:
        await context.write(message)  # type: ignore[arg-type]


def _requests(chunks: int) -> list[pb.ConverseRequest]:
    """The client's side, built before the profile starts: its work is not the server's."""
    audio = bytes(pcm16_bytes(CHUNK_MS, CLIENT_RATE_HZ))
    requests = [pb.ConverseRequest(open_session=pb.OpenSession())]
    for seq in range(1, chunks + 1):
        requests.append(append(seq, audio))
        if seq % ACK_EVERY == 0:  # the events so far: session_created and one delta a chunk
            requests.append(pb.ConverseRequest(ack_events=pb.AckEvents(seq=seq + 1)))
    return requests


async def _session(
    transport: str, chunks: int, profile: cProfile.Profile, record: str | None = None
) -> tuple[int, float]:
    """Runs one session of ``chunks`` appends under ``profile`` (recorded into ``record``);
    returns the events written and the process's CPU seconds, its threads included."""
    settings = mirror_settings()
    engine = create_engine(settings.engine, dict(settings.engine_options))
    await engine.start()
    # The clock moves by a chunk's length per request, as a paced client's would.
    now = [0.0]

    def clock() -> float:
        return now[0]

    registry = Registry(settings.limits, engine.features)
    recorder = None
    if record is not None:
        registry.recording = "all"
        recording = RecordSettings(policy="all", folder=Path(record))
        recorder = Recorder(recording, clock, engine.features, {}, "profile")
        await recorder.start()
    sessions = Sessions(registry, engine, clock, recorder=recorder)
    started = time.process_time()
    requests = _requests(chunks)
    written = 0
    if transport in ("grpc", "echo"):
        context = Context([request.SerializeToString() for request in requests], now)
        converse = DuplexServicer(sessions).converse if transport == "grpc" else _echo
        profile.enable()
        call = asyncio.create_task(converse(None, context))  # type: ignore[arg-type]
        await context.done
        await asyncio.sleep(0)
        profile.disable()
        written = context.written
        call.cancel()
    else:
        stream = LocalService(sessions).converse()
        flushed: list[bytes] = []

        async def write(payload: bytes) -> None:
            flushed.append(payload)

        profile.enable()
        for request in requests:
            now[0] += CHUNK_MS / 1000
            await stream.write(request)
            if request.HasField("ack_events"):
                continue
            # As the bridge's relay does: what the command made goes out from the task that
            # wrote it; else the next event is read from the stream (the open's created).
            await stream.flush(write)
            if not flushed:
                flushed.append(await stream.read_serialized() or b"")
            written += bool(flushed.pop())
        profile.disable()
        stream.cancel()
    await sessions.abandon()
    if recorder is not None:
        await recorder.stop()  # the writer's work is counted: it finishes here
    cpu_s = time.process_time() - started
    await engine.stop()
    return written, cpu_s


async def _websocket(transport: str, chunks: int, profile: cProfile.Profile) -> int:
    """Serves a websocket (the bridge, or the raw echo) on this thread, profiled, while a
    client in another thread sends ``chunks`` appends one at a time; returns the deltas."""
    from aiohttp import web

    from omni_cli.config import ServeSettings
    from omni_cli.launch import start_service

    runner: web.AppRunner | None = None
    service = None
    if transport == "bridge":
        # The client sends each append when the one before is answered, tens of times real
        # time, on the service's real clock: a paced client never meets the session's rate
        # limits, so they are lifted here, and the path profiled is the paced one.
        settings = mirror_settings()
        unlimited = dataclasses.replace(
            settings.limits,
            session_commands_per_s=1e9,
            session_audio_bytes_per_s=1e12,
            key_commands_per_s=1e9,
            key_audio_bytes_per_s=1e12,
        )
        settings = dataclasses.replace(settings, limits=unlimited)
        service = await start_service(ServeSettings(server=settings, http_port=0))
        port = service.http_port or 0
    else:
        app = web.Application()
        app.router.add_get("/v1/realtime", _ws_echo)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
    loop = asyncio.get_running_loop()
    started, answered = loop.create_future(), loop.create_future()
    url = f"http://127.0.0.1:{port}/v1/realtime?model=loopback&extensions=1"

    def client() -> None:
        count = uvloop.run(
            _ws_client(url, chunks, lambda: loop.call_soon_threadsafe(started.set_result, None))
        )
        loop.call_soon_threadsafe(answered.set_result, count)

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    await started
    profile.enable()
    count = await answered
    profile.disable()
    thread.join()
    if service is not None:
        await service.stop()
    if runner is not None:
        await runner.cleanup()
    return int(count)


async def _ws_echo(request: object) -> object:
    """The raw aiohttp echo of ``scripts/bench_bridge.py``: parse, decode, answer."""
    import binascii

    import orjson
    from aiohttp import WSMsgType, web

    ws = web.WebSocketResponse(compress=False, max_msg_size=16 * 1024 * 1024)
    await ws.prepare(request)  # type: ignore[arg-type]
    n = 0
    async for message in ws:
        if message.type is not WSMsgType.TEXT:
            continue
        event = orjson.loads(message.data)
        if event.get("type") != "input_audio_buffer.append":
            continue
        audio = binascii.a2b_base64(event["audio"], strict_mode=True)
        n += 1
        answer = {
            "type": DELTA,
            "response_id": "resp_bench",
            "delta": binascii.b2a_base64(audio, newline=False).decode("ascii"),
            "event_id": f"event_bench_{n}_0",
            "server_event_seq": n,
        }
        await ws.send_frame(orjson.dumps(answer), WSMsgType.TEXT)
    return ws


async def _ws_client(url: str, chunks: int, ready: Callable[[], object]) -> int:
    """Sends ``chunks`` appends, one at a time, each after the answer to the one before."""
    import aiohttp
    import orjson
    from aiohttp import WSMsgType

    frame = append_frame(bytes(pcm16_bytes(CHUNK_MS, CLIENT_RATE_HZ)))
    answered = 0
    async with aiohttp.ClientSession() as http, http.ws_connect(url, max_msg_size=0) as ws:
        ready()
        while answered < chunks:
            await ws.send_frame(frame, WSMsgType.TEXT)
            while True:
                message = await ws.receive()
                event = orjson.loads(message.data)
                if event.get("type") == DELTA:
                    break
                if event.get("type") == "error":  # a refused append is never answered
                    raise RuntimeError(f"chunk {answered + 1} refused: {event['error']}")
            answered += 1
            seq = event.get("server_event_seq", 0)
            if seq and answered % ACK_EVERY == 0:
                ack = {"type": "session.event_ack", "server_event_seq": seq}
                await ws.send_frame(orjson.dumps(ack), WSMsgType.TEXT)
    return answered


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument(
        "--transport", choices=("grpc", "local", "echo", "bridge", "ws-echo"), default="grpc"
    )
    parser.add_argument("--top", type=int, default=0, help="list this many functions")
    parser.add_argument("--record", action="store_true", help="record the session")
    args = parser.parse_args(argv)
    profile = cProfile.Profile()
    cpu_s = 0.0
    if args.transport in ("bridge", "ws-echo"):
        written = uvloop.run(_websocket(args.transport, args.chunks, profile))
    else:
        with tempfile.TemporaryDirectory(prefix="profile-chunk-") as folder:
            run = _session(args.transport, args.chunks, profile, folder if args.record else None)
            written, cpu_s = uvloop.run(run)
    if written < args.chunks:
        print(f"error: {written} events for {args.chunks} chunks", file=sys.stderr)
        return 1
    stats = pstats.Stats(profile)
    total = sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]
    per_chunk = {
        func: entry[1] / args.chunks
        for func, entry in stats.stats.items()  # type: ignore[attr-defined]
    }
    ours = {f: n for f, n in per_chunk.items() if any(part in f[0] for part in OURS)}
    hot_ours = {f: n for f, n in ours.items() if n >= 0.5}
    print(f"transport: {args.transport}, {args.chunks} chunks of {CHUNK_MS} ms")
    print(f"Python calls per chunk: {total / args.chunks:.1f}")
    print(f"of which in our code: {sum(ours.values()):.1f}")
    print(f"functions of ours on every chunk's path: {len(hot_ours)}")
    if cpu_s:
        print(f"process CPU per chunk, profiled (all threads): {cpu_s / args.chunks * 1e6:.0f} us")
    if args.top:
        ranked = sorted(per_chunk.items(), key=lambda item: -item[1])[: args.top]
        for (filename, line, name), count in ranked:
            print(f"{count:7.2f}  {name}  ({os.path.basename(filename)}:{line})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
