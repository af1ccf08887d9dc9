"""One driver for the clients in other languages: start one, read what it printed, and hold
it to the server's record.

Each client (:class:`GoClient`, :class:`NodeClient`) says a WAV file to a target, prints every
event as a line (the Go client as protojson, the Node client as JSON of its own shape) and a
summary on stderr, and saves the reply. :class:`Run` is what either printed, read the same way,
and :func:`assert_server_agrees` the verdict, which comes from the server
(tests/clients/server_truth.py), not from the client: one session was opened and then resumed,
never reopened; every chunk reached the engine exactly once and in order; the client printed
every journaled event once, in order, each as journaled, field for field; the saved reply is
the audio the server journaled.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from google.protobuf import duration_pb2, json_format

from omni_grpc.core.commands import AppendAudio, kind_of
from omni_grpc.wire import pb
from tests.clients.server_truth import ServerTruth

RATE_HZ = 16000  # the engine's canonical input rate: the engine gets the very bytes sent
CHUNK_MS = 100
CHUNK_BYTES = RATE_HZ * CHUNK_MS // 1000 * 2


def gliding_tone(path: Path, seconds: float) -> bytes:
    """Writes a WAV of a gliding tone (no two chunks alike) and returns its samples."""
    t = np.arange(int(RATE_HZ * seconds)) / RATE_HZ
    samples = (0.3 * 32767 * np.sin(2 * math.pi * (200 + 150 * t) * t)).astype("<i2").tobytes()
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE_HZ)
        wav.writeframes(samples)
    return samples


@dataclass
class Printed:
    """One event as a client printed it: its kind and seq, and the line read."""

    kind: str
    seq: int
    line: Any  # the Go client's ConverseResponse, the Node client's JSON object


@dataclass
class Run:
    """What a client said: its events, the session it named, its counts and its saved reply."""

    events: list[Printed]
    session_id: str
    reconnects: int
    resent: int  # commands sent again after a resume
    route: str  # the routing key it kept at the end ("" when it never got one)
    reply: bytes
    reply_rate_hz: int
    queued_at: list[int] = field(default_factory=list)  # each position the server's queue told

    def kinds(self, events: list[Printed] | None = None) -> list[str]:
        return [e.kind for e in (self.events if events is None else events)]


@dataclass(frozen=True)
class GoBuild:
    """The built Go command and the GOPATH package tree it was built from."""

    binary: Path
    package_dir: Path
    env: dict[str, str]


class Client:
    """How to run one client and read it. Subclasses say the rest."""

    name: str
    api_key: str
    seeds: ClassVar[dict[str, int]]  # the chaos proxy's seed, by scenario ("served", "route")
    timeout: str  # the value of its --timeout flag for 30 seconds
    root_flag: str  # the flag that names the server's certificate as the one root
    route_flags: tuple[str, ...] = ()  # extra flags of the routing-key scenario

    def command(self) -> list[str]:
        raise NotImplementedError

    async def start(
        self, target: str, wav: Path, out: Path, *extra: str, api_key: str | None = None
    ) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *self.command(),
            *("--target", target, "--api-key", api_key or self.api_key, "--wav", str(wav)),
            *("--out", str(out)),
            *extra,
            *("--chunk-ms", str(CHUNK_MS), "--timeout", self.timeout),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )

    async def finish(self, process: asyncio.subprocess.Process, out: Path) -> Run:
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
        text = stderr.decode()
        assert process.returncode == 0, text
        with wave.open(str(out), "rb") as wav:
            reply, rate_hz = wav.readframes(wav.getnframes()), wav.getframerate()
        run = self.read(stdout.decode(), text, reply, rate_hz)
        run.queued_at = queued_positions(text)
        return run

    def read(self, stdout: str, stderr: str, reply: bytes, rate_hz: int) -> Run:
        raise NotImplementedError

    def assert_same_event(self, printed: Printed, journaled: pb.ConverseResponse) -> None:
        raise NotImplementedError


class GoClient(Client):
    """``omni-stream-wav`` (clients/go, Debian's grpc-go), built by ``clients/go/build.sh``."""

    name = "go"
    api_key = "go-client-test-key"
    seeds: ClassVar[dict[str, int]] = {"served": 16, "route": 18}
    timeout = "30s"
    root_flag = "--ca"

    def __init__(self, build: GoBuild) -> None:
        self.build = build

    def command(self) -> list[str]:
        return [str(self.build.binary)]

    def read(self, stdout: str, stderr: str, reply: bytes, rate_hz: int) -> Run:
        session = re.search(r"^session (\S+) on ", stderr, re.MULTILINE)
        counts = re.search(r"^reconnects: (\d+), commands resent: (\d+)$", stderr, re.MULTILINE)
        route = re.search(r"^route: (\S+)$", stderr, re.MULTILINE)
        assert session and counts, stderr
        events = [json_format.Parse(line, pb.ConverseResponse()) for line in stdout.splitlines()]
        return Run(
            events=[Printed(str(e.WhichOneof("event")), e.seq, e) for e in events],
            session_id=session.group(1),
            reconnects=int(counts.group(1)),
            resent=int(counts.group(2)),
            route=route.group(1) if route else "",
            reply=reply,
            reply_rate_hz=rate_hz,
        )

    def assert_same_event(self, printed: Printed, journaled: pb.ConverseResponse) -> None:
        assert printed.line == journaled


class NodeClient(Client):
    """``stream_wav.mjs`` (clients/node, @grpc/grpc-js)."""

    name = "node"
    api_key = "node-client-test-key"
    seeds: ClassVar[dict[str, int]] = {"served": 15, "route": 17}
    timeout = "30"
    root_flag = "--root-cert"
    route_flags = ("--fast",)

    def __init__(self, script: Path) -> None:
        self.script = script

    def command(self) -> list[str]:
        return ["node", str(self.script)]

    def read(self, stdout: str, stderr: str, reply: bytes, rate_hz: int) -> Run:
        summary = json.loads(stderr.splitlines()[-1])
        events = [json.loads(line) for line in stdout.splitlines()]
        return Run(
            events=[Printed(e["type"], e["seq"], e) for e in events],
            session_id=summary["session_id"],
            reconnects=summary["reconnects"],
            resent=summary["resent_commands"],
            route=summary["route"],
            reply=reply,
            reply_rate_hz=rate_hz,
        )

    def assert_same_event(self, printed: Printed, journaled: pb.ConverseResponse) -> None:
        """Every field the server set has the same value in the print (64-bit numbers as
        numbers, audio as its size)."""
        assert printed.kind == journaled.WhichOneof("event")
        fields = json_format.MessageToDict(journaled, preserving_proto_field_name=True)
        for path, value in leaves(fields):
            shown: Any = printed.line
            for key in path:
                shown = shown[key]
            if isinstance(shown, dict) and "bytes" in shown:  # bytes print as their count
                assert shown["bytes"] == len(base64.b64decode(value)), path
            elif isinstance(shown, int) and isinstance(value, str):  # 64-bit: a string in JSON
                assert shown == int(value), path
            elif isinstance(shown, dict) and set(shown) == {"seconds", "nanos"}:
                # A Duration prints as its two fields; proto JSON writes it as "1.5s".
                duration = duration_pb2.Duration()
                duration.FromJsonString(value)
                assert (shown["seconds"], shown["nanos"]) == (duration.seconds, duration.nanos), (
                    path
                )
            else:
                assert shown == value, (path, shown, value)


def queued_positions(stderr: str) -> list[int]:
    """The positions of the session_queued notices a client printed (both print them alike:
    ``queued: position N, estimated wait M ms, class C``)."""
    return [int(n) for n in re.findall(r"^queued: position (\d+), ", stderr, re.MULTILINE)]


def leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """The scalar values of a JSON-like tree, each with its path of keys and indexes."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in leaves(item, (*path, key))]
    if isinstance(value, list):
        return [leaf for index, item in enumerate(value) for leaf in leaves(item, (*path, index))]
    return [(path, value)]


def assert_server_agrees(client: Client, truth: ServerTruth, run: Run, sent: bytes) -> str:
    """Checks the run against the server's record; returns the session id."""
    assert truth.opened == [run.session_id]  # resumed every time, never reopened
    session_id = run.session_id
    # The engine got every command once, numbered 1, 2, 3 … and every chunk in order.
    commands = truth.engine_input[session_id]
    assert [c.client_seq for c in commands] == list(range(1, len(commands) + 1))
    chunks = math.ceil(len(sent) / CHUNK_BYTES)
    kinds = [kind_of(c) for c in commands]
    assert kinds[: chunks + 1] == ["append_input_audio"] * chunks + ["commit_input_audio"]
    assert b"".join(c.audio for c in commands[:chunks] if isinstance(c, AppendAudio)) == sent
    # The client printed every journaled event once, in order, each exactly as journaled.
    journal = truth.events(session_id)
    numbered = [e for e in run.events if e.seq]
    assert [e.seq for e in numbered] == list(range(1, len(journal) + 1))
    for printed, journaled in zip(numbered, journal, strict=True):
        client.assert_same_event(printed, journaled)
    assert numbered[-1].kind == "session_closed"
    # The saved reply is the audio the server journaled: the loopback engine says the input
    # back, so it is as long as the input, at the output rate.
    assert run.reply == truth.reply_audio(session_id)
    audio = [e.output_audio_delta for e in journal if e.HasField("output_audio_delta")]
    assert {delta.sample_rate_hz for delta in audio} == {run.reply_rate_hz}
    assert len(run.reply) // 2 == len(sent) // 2 * run.reply_rate_hz // RATE_HZ
    return session_id
