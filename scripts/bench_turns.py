#!/usr/bin/env python3
"""Measures turn-taking as a person on the other end would notice it, per setting.

    .venv/bin/python scripts/bench_turns.py [--settings NAME,...] [--per-kind N]
                                            [--transport grpc|bridge]
                                            [--engine-option KEY=VALUE ...] [--target HOST:PORT]

Plays the turn-taking set (scripts/turn_set.py: complete requests, hesitations inside
sentences, backchannels, fillers and coughs over a reply, meant interruptions) against the
service, each dialogue in a session of its own, in real time, and prints one row per setting
(scripts/turn_score.py says what each column measures). ``--transport`` says how the client
reaches it: ``grpc`` (the default), the project's Python client; ``bridge``, the ``openai``
SDK's realtime client through the websocket bridge that ``omni-grpc serve`` runs beside the
service (scripts/turn_bridge.py: GA's session.update and events, and the duplex extensions for
the settings that judge interruptions). The service is the default engine (embedded: Whisper
base, SmolLM2, espeak-ng), started in a child process with ``--engine-option``s, unless
``--target`` names one already running (its gRPC address, or its bridge's with ``bridge``).

Settings (``--settings``, comma-separated; all by default):

* ``fixed 500 ms``: server VAD's fixed silence, and OpenAI's interruptions (any speech ends the
  reply): what a stock client gets;
* ``fixed 500 ms judged``: the same silence, interruptions judged (by words, the reply paused
  and resumed after a false one);
* ``semantic low``, ``semantic medium``, ``semantic high``, ``semantic auto``: SmolLM2 judges
  the end of each turn at each pause, interruptions judged.

The figures depend on the machine and its load: record them on a quiet one (docs/performance.md
says how they were taken). ``--per-kind N`` plays the first N dialogues of each kind (a smoke
run), ``--kinds`` only some kinds (complete, hesitation, backchannel, interruption),
``--part held-out`` the part of the set no tuning saw (``all``: both; scripts/turn_set.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import turn_score
from turn_driver import GrpcTransport, Record, Setting, Transport, play
from turn_set import KINDS, PARTS, dialogues

from omni_grpc.client import DuplexClient
from omni_grpc.wire import pb

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 300.0  # loading Whisper, SmolLM2 and the voice on a busy machine
JUDGED = pb.InterruptionConfig(mode=pb.INTERRUPTION_MODE_WORDS, resume_false_interruption=True)


def _semantic(eagerness: pb.Eagerness.ValueType) -> pb.TurnDetection:
    return pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SEMANTIC_VAD, eagerness=eagerness)


FIXED = pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SERVER_VAD, silence_duration_ms=500)
SETTINGS = {
    setting.name: setting
    for setting in (
        Setting("fixed 500 ms", FIXED),
        Setting("fixed 500 ms judged", FIXED, JUDGED),
        Setting("semantic low", _semantic(pb.EAGERNESS_LOW), JUDGED),
        Setting("semantic medium", _semantic(pb.EAGERNESS_MEDIUM), JUDGED),
        Setting("semantic high", _semantic(pb.EAGERNESS_HIGH), JUDGED),
        Setting("semantic auto", _semantic(pb.EAGERNESS_AUTO), JUDGED),
    )
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_service(options: list[str], transport: str) -> tuple[subprocess.Popen[bytes], str]:
    """The service with the default engine in a child process, on free ports; returns it and
    the address ``transport`` reaches it at: gRPC's, or that of the websocket bridge, which
    ``omni-grpc serve`` runs in the service's process."""
    grpc_port = free_port()
    bridge_port = free_port() if transport == "bridge" else 0  # 0: no bridge
    command = [sys.executable, "-m", "omni_cli", "serve", "--grpc-port", str(grpc_port)]
    command += ["--http-port", str(bridge_port), "--log-level", "warning"]
    for option in options:
        command += ["--engine-option", option]
    port = bridge_port if transport == "bridge" else grpc_port
    return subprocess.Popen(command, cwd=ROOT), f"127.0.0.1:{port}"


async def _reachable(target: str, transport: str) -> None:
    if transport == "bridge":
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://{target}/health") as answer,
        ):
            answer.raise_for_status()
    else:
        client = await DuplexClient.connect(target)
        await client.close()


async def wait_ready(target: str, transport: str) -> None:
    until = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            await _reachable(target, transport)
        except Exception:
            if time.monotonic() > until:
                raise
            await asyncio.sleep(1.0)
            continue
        return


def make_transport(kind: str, target: str) -> Transport:
    if kind == "bridge":
        # Imported here: the openai SDK comes with the test tier, not the runtime packages.
        from turn_bridge import BridgeTransport

        return BridgeTransport(target)
    return GrpcTransport(target)


async def run(
    target: str,
    transport: str,
    names: list[str],
    per_kind: int | None,
    kinds: set[str],
    part: str = "tuning",
) -> list[tuple[turn_score.Row, list[Record]]]:
    """Each setting's row, with the records it was scored on."""
    rows = []
    for name in names:
        setting, records = SETTINGS[name], []
        for dialogue in [d for d in dialogues(per_kind, part) if d.kind in kinds]:
            record = await play(dialogue, setting, make_transport(transport, target))
            records.append(record)
            print(f"  {name}: {turn_score.describe(record)}", file=sys.stderr)
        rows.append((turn_score.score(name, records), records))
    return rows


def _table(header: tuple[str, ...], lines: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for line in lines:
        print("| " + " | ".join(line) + " |")


def print_tables(rows: list[tuple[turn_score.Row, list[Record]]]) -> None:
    """The settings' row each, then for each setting where each turn's time went."""
    _table(turn_score.HEADER, [turn_score.cells(row) for row, _ in rows])
    for row, records in rows:
        timed = [r for r in records if r.dialogue.kind in ("complete", "hesitation")]
        if timed:
            print(f"\nwhere the time went, {row.setting} (ms from the end of speech, client):\n")
            _table(turn_score.TIMING_HEADER, [turn_score.timing(r) for r in timed])


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names")
    parser.add_argument("--per-kind", type=int, default=None, help="dialogues of each kind")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    parser.add_argument(
        "--part", choices=PARTS, default="tuning", help="the set's part (turn_set.py)"
    )
    parser.add_argument("--engine-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--transport", choices=("grpc", "bridge"), default="grpc")
    parser.add_argument(
        "--target", help="a running service (HOST:PORT, its bridge's with bridge), not a child"
    )
    args = parser.parse_args()
    names = [name.strip() for name in args.settings.split(",") if name.strip()]
    unknown = [name for name in names if name not in SETTINGS]
    if unknown:
        parser.error(f"unknown settings {unknown}; known: {', '.join(SETTINGS)}")
    transport = args.transport
    child, target = (
        (None, args.target) if args.target else start_service(args.engine_option, transport)
    )
    load_before = os.getloadavg()
    try:
        await wait_ready(target, transport)
        kinds = set(args.kinds.split(","))
        rows = await run(target, transport, names, args.per_kind, kinds, args.part)
    finally:
        if child is not None:
            child.terminate()
            child.wait(timeout=30)
    via = "the bridge (openai SDK)" if transport == "bridge" else "gRPC"
    print(f"through {via}, the {args.part} part of the set\n")
    print_tables(rows)
    after = os.getloadavg()
    print(f"\nload average {load_before[0]:.1f} before, {after[0]:.1f} after (1 min)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
