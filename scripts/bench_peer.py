#!/usr/bin/env python3
"""Benchmark: our websocket bridge against vLLM-Omni's own duplex websocket server, in one run.

The same paced load (Realtime websocket sessions, one ``input_audio_buffer.append`` of pcm16
per chunk, each session acknowledging nothing it need not) against two child servers, each
pinned to CPU 0, the load generator (this process) on CPU 1:

* **vllm-omni**: vLLM-Omni's own server for its duplex sessions, in ``.venv-vllm-omni``: the
  ``/v1/realtime?duplex=1`` route of its OpenAI API server, mounted from the installed package
  on a bare FastAPI app under uvicorn, as ``vllm serve`` runs it; its ``OmniDuplexSessionHandler``,
  ``DuplexOmni``'s session API, the session manager, a runner per session and the MiniCPM-o 4.5
  duplex plugin, all as they ship. Replaced is what the vLLM tier's tests replace
  (``tests/vllm/omni/harness.py``): the GPU stages and the transport between API and engine
  process (here one process and loop, which spares it an IPC hop per unit). The stage stand-in
  answers like our mirror engine: each model unit of input (MiniCPM-o takes a second of audio
  at a time) is answered at once, on the loop's next turn, with as much audio and a word,
  ending the model's turn. Its input is pcm16 at 16 kHz, its native rate.
* **bridge**: ours as ``omni-grpc serve`` runs it, the loopback engine in ``mirror`` mode
  (``scripts/bench_bridge.py``'s child), answering every chunk; input pcm16 at 24 kHz, the
  OpenAI default.

So vLLM-Omni answers once per second of input and we answer every chunk: the comparison is of
what each server spends to take a session's audio in and give as much back. Reported: server
CPU per input chunk at 10 and 100 paced sessions of 20 ms (median of three, interleaved), the
mirror engine's own share of ours, and the sessions each sustains (every answer owed came, p99
answer latency under 50 ms; an answer's latency is from the last chunk it answers), by
bisection with repeated trials (:mod:`omni_grpc.bench.measure`).

    scripts/bench_peer.py            # full run, about 5 to 10 minutes
    scripts/bench_peer.py --quick    # a smoke run of a few seconds
    scripts/bench_peer.py --json     # every figure as one JSON document on stdout

Needs ``.venv-vllm-omni`` (``scripts/vllm_env.sh``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import random
import socket
import sys
import wave
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_bridge import Load as BridgeLoad  # noqa: E402 - this script's folder

from omni_grpc.bench import harness  # noqa: E402
from omni_grpc.bench.measure import SteppedLoad, measure  # noqa: E402
from omni_grpc.bench.ws_load import WsSession, append_frame  # noqa: E402
from omni_grpc.wire.pcm import pcm16_bytes  # noqa: E402

PEER_PYTHON = ROOT / ".venv-vllm-omni" / "bin" / "python"
PEER_RATE_HZ = 16000  # vLLM-Omni's input rate, and the rate of its model units' samples
UNIT_MS = 1000  # MiniCPM-o's model unit: one second of input
MAX_SESSIONS = 10_000
MIN_ANSWERS, MAX_STEP_S = 100, 15.0  # see PeerLoad.step
KINDS = ("vllm-omni", "bridge")


# -- vLLM-Omni's server (a child process, in its own environment) ------------------------------


async def _serve_peer() -> None:
    """Serves until the benchmark goes (see the module docstring)."""
    import uvicorn
    from fastapi import FastAPI

    _stand_in_for_torchaudio()
    from vllm_omni.config.stage_config import DuplexSessionRuntimeConfig
    from vllm_omni.entrypoints.duplex.serving import OmniDuplexSessionHandler
    from vllm_omni.entrypoints.openai.api_server import router

    from tests.vllm.omni.harness import start_session_layer

    layer = start_session_layer(max_sessions=MAX_SESSIONS)
    _answer_like_the_mirror(layer)
    runtime = DuplexSessionRuntimeConfig(max_sessions=MAX_SESSIONS)
    # What DuplexOmni reads of its engine (the harness's stands in for it).
    layer.engine.duplex_session_config = runtime  # type: ignore[attr-defined]
    app = FastAPI()
    app.include_router(router)
    # What build_app sets for one API server with a duplex engine and no warm-up.
    app.state.openai_serving_duplex = OmniDuplexSessionHandler(duplex_omni=layer.omni)
    app.state.api_server_count = 1
    app.state.duplex_warmup_done = None
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", ws_max_size=16 * 2**20)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    while not server.started:  # noqa: ASYNC110 - uvicorn tells it by a flag, not an event
        await asyncio.sleep(0.01)
    harness.announce_ready(listener.getsockname()[1])
    await harness.serve_until_parent_gone()
    server.should_exit = True
    await serving


def _stand_in_for_torchaudio() -> None:
    """The API server imports torchaudio for its speech endpoints; PyPI has only a CUDA build
    of it, which cannot load beside the CPU torch. Nothing on the duplex path calls it: a
    package whose every module imports and whose every function fails when called stands in,
    so a call would show, not pass silently."""
    import importlib.abc
    import importlib.machinery
    import importlib.util
    import types

    if importlib.util.find_spec("torchaudio") is not None:
        return

    def unavailable(module: str, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def call(*args: object, **kwargs: object) -> None:
            raise RuntimeError(f"{module}.{name} called: the benchmark's torchaudio stand-in")

        return call

    class StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname: str, path: object, target: object = None) -> Any:
            if fullname.split(".")[0] != "torchaudio":
                return None
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

        def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
            module = types.ModuleType(spec.name)
            module.__path__ = []
            module.__getattr__ = lambda name: unavailable(spec.name, name)  # type: ignore[method-assign]
            return module

        def exec_module(self, module: types.ModuleType) -> None:
            pass

    sys.meta_path.append(StandIn())


def _answer_like_the_mirror(layer: Any) -> None:
    """The stage port answers each unit of input audio with as much audio (see above)."""
    from omni_grpc.bench import meter

    model = layer.model
    loop = asyncio.get_running_loop()
    recorded = model.submit
    # The stand-in's own work, reported apart like our mirror's; clocked at every call (once
    # per second of a session's input: too seldom for the mirror's one call in sixteen).
    speak = meter.metered(_speak, every=1)

    async def submit(submission: Any) -> Any:
        duplex = submission.prompt.get("model_intermediate_buffer", {}).get("duplex", {})
        audio = (duplex.get("payload") or {}).get("audio")
        result = await recorded(submission)
        model.submissions.clear()  # the harness keeps them for its tests; a run would pile up
        if audio:
            seconds = len(base64.b64decode(audio)) / 4 / PEER_RATE_HZ  # float32 samples
            loop.call_soon(speak, layer, submission.context.session_id, seconds)
        return result

    model.submit = submit


def _speak(layer: Any, session_id: str, seconds: float) -> None:
    # The model speaks each unit back and goes on speaking: one response, a delta per unit.
    # (A turn it ends, or a listen, leaves vLLM-Omni's runner listening from then on.)
    if session_id in layer.manager.runners:
        layer.speak(session_id, "echo.", seconds)


# -- load ---------------------------------------------------------------------------------


class UnitEnds(deque[float]):
    """Send times of the chunks that end a model unit: the ones vLLM-Omni answers."""

    def __init__(self, chunks_per_unit: int, already_sent: int) -> None:
        super().__init__()
        self.every, self.seen = chunks_per_unit, already_sent

    def append(self, sent_at: float) -> None:
        self.seen += 1
        if self.seen % self.every == 0:
            super().append(sent_at)


def _voice_uri() -> str:
    """A second of 16 kHz voice-like audio as a data: URI: the voice the model speaks with."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(PEER_RATE_HZ)
        wav.writeframes(random.Random(1).randbytes(pcm16_bytes(1000, PEER_RATE_HZ)))
    return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


class PeerSession(WsSession):
    """A vLLM-Omni duplex session: opened with turn detection off and auto response on, so
    the model hears every unit as it comes and answers it."""

    def __init__(
        self, http: aiohttp.ClientSession, url: str, frame: bytes, unit: int, lead: int
    ) -> None:
        super().__init__(http, url, frame)
        self.lead = lead
        self.sent = UnitEnds(unit, lead)

    async def open(self) -> None:
        ws = await self.connect()
        session = {
            "model": "openbmb/MiniCPM-o-4_5",
            "turn_detection": None,
            "extra_body": {"auto_response": True, "ref_audio": VOICE_URI},
        }
        await ws.send_str(orjson.dumps({"type": "session.update", "session": session}).decode())
        while True:
            event = orjson.loads((await ws.receive()).data)
            if event.get("type") == "session.created":
                break
            if event.get("type") == "error":
                raise SystemExit(f"vLLM-Omni refused the session: {event}")
        # Sessions start at random points of a model unit, as real ones do: paced sessions
        # all starting together would end their units together, and vLLM-Omni would take the
        # units of every session in one burst each second. Before the measured window.
        for _ in range(self.lead):
            await self.send()


class PeerLoad(harness.PacedLoad):
    def __init__(
        self,
        port: int,
        server_pid: int,
        engine_meter: Callable[[], Awaitable[float]],
        *,
        quick: bool,
    ) -> None:
        super().__init__("vllm-omni", port, server_pid, engine_meter)
        self.min_answers = 0 if quick else MIN_ANSWERS  # a quick run measures nothing

    async def step(self, sessions: int, chunk_ms: int, duration_s: float) -> harness.Tally:
        frame = append_frame(self.rng.randbytes(pcm16_bytes(chunk_ms, PEER_RATE_HZ)))
        unit = max(1, UNIT_MS // chunk_ms)
        # The p99 of a few answers is their largest, which one stall of a shared machine sets:
        # a step of a few sessions, each answered once a second, lasts until it has MIN_ANSWERS
        # (our bridge answers every chunk and has thousands in the usual step).
        enough_s = self.min_answers / sessions * UNIT_MS / 1000 + 1.0
        duration_s = max(duration_s, min(enough_s, MAX_STEP_S))
        url = f"http://127.0.0.1:{self.port}/v1/realtime?duplex=1"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            group: list[harness.LoadSession] = [
                PeerSession(http, url, frame, unit, self.rng.randrange(unit))
                for _ in range(sessions)
            ]
            return await self.paced(group, chunk_ms, duration_s, per_answer=unit)


VOICE_URI = _voice_uri()


# -- main ---------------------------------------------------------------------------------


async def bench(quick: bool, as_json: bool) -> int:
    if not PEER_PYTHON.exists():
        raise SystemExit("no .venv-vllm-omni: build it with scripts/vllm_env.sh")
    load_before = harness.start_run()
    peer = harness.Child([str(PEER_PYTHON), __file__], "peer")
    ours = harness.Child([sys.executable, str(ROOT / "scripts" / "bench_bridge.py")], "ours")
    loads: list[SteppedLoad] = [
        PeerLoad(peer.ports[0], peer.pid, peer.engine_cpu_s, quick=quick),
        BridgeLoad("bridge", ours.ports[1], ours.pid, ours.engine_cpu_s),
    ]
    # (start, top) by kind: tops far above any capacity measured, so it is found, not capped.
    searches = {20: dict.fromkeys(KINDS, (16, 4096)), 100: dict.fromkeys(KINDS, (64, 8192))}
    try:
        results = await measure(loads, searches, quick=quick)
    finally:
        peer.stop()
        ours.stop()
    rows = []
    for sessions in sorted({n for _, n in results.costs}):
        theirs, mine = (results.costs[(kind, sessions)] for kind in KINDS)
        ratio = mine.us_per_chunk / theirs.us_per_chunk if theirs.us_per_chunk else 0.0
        rows.extend(harness.cost_rows([theirs.cells, mine.cells], sessions, ratio, 1.0))
        rows.append(harness.client_cpu_row(sessions, [theirs.client_cpu, mine.client_cpu]))
    for chunk_ms in searches:
        theirs_cap, mine_cap = (results.caps[(kind, chunk_ms)] for kind in KINDS)
        ratio = mine_cap.sessions / theirs_cap.sessions if theirs_cap.sessions else 0.0
        met = "n/a (quick)" if quick else "yes" if ratio > 1 else "no"
        rows.append(
            [
                f"sessions sustained, p99 answer < 50 ms, {chunk_ms} ms chunks",
                theirs_cap.cell(),
                mine_cap.cell(),
                f"{ratio:.2f}x",
                "> 1x",
                met,
            ]
        )
    for name in ("p50", "p99"):
        theirs_ms, mine_ms = (getattr(results.single[kind], name) for kind in KINDS)
        label = f"answer latency {name}, 1 session, 20 ms chunks"
        rows.append([label, f"{theirs_ms:.2f} ms", f"{mine_ms:.2f} ms", "-", "-", "-"])
    header = ["measure", "vLLM-Omni", "ours, bridge", "ours / vLLM-Omni", "target", "met"]
    document = results.document("peer", header, rows, load_before) if as_json else None
    harness.finish_run(header, rows, load_before, document)
    return harness.lost_at_one_session(results.single, "answers")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--json", action="store_true", help=harness.JSON_HELP)
    parser.add_argument("--serve-peer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_peer:
        harness.pin(harness.SERVER_CPU)
        return harness.run(_serve_peer())
    with harness.progress_to_stderr(args.json):
        return harness.run(bench(args.quick, args.json))


if __name__ == "__main__":
    sys.exit(main())
