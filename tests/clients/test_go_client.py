"""The Go client (clients/go, Debian's grpc-go) against the real server, cut on purpose.

``omni-stream-wav`` is built once with ``clients/go/build.sh`` and runs as a subprocess: it says
a WAV file through a ChaosProxy to a real server with the loopback engine, prints every event as
a protojson line and saves the reply. One run is cut twice (during the audio upload, then during
the reply), one is not, and one goes straight to a TLS server with a pinned certificate. The
verdict comes from the server (tests/clients/server_truth.py), not from the client: one session
was opened and then resumed, never reopened; every chunk reached the engine exactly once and in
order; the client printed every journaled event once, in order, and each printed event is the
journaled one field for field; the saved reply is the audio the server journaled. The Go
sources are also held to gofmt, go vet and their own go tests.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import shutil
import subprocess
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from tests.client.proxy import ChaosProxy
from tests.clients.server_truth import ServerTruth
from tests.serving import eventually, self_signed_certificate, serving, settings

GO_DIR = Path(__file__).parents[2] / "clients" / "go"
GO_PACKAGES = (
    "golang-go protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev "
    "golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev"
)
API_KEY = "go-client-test-key"
RATE_HZ = 16000  # the engine's canonical input rate: the engine gets the very bytes sent
CHUNK_MS = 100
CHUNK_BYTES = RATE_HZ * CHUNK_MS // 1000 * 2
UPLOAD_CUT_BYTES = 12 * CHUNK_BYTES  # client-to-server bytes: about a third into the upload
REPLY_CUT_BYTES = 40_000  # server-to-client bytes after the first cut: inside the reply

Served = tuple[ServerTruth, RunningServer, ChaosProxy]

# A cold build compiles grpc-go from source, which takes a while on two busy cores.
pytestmark = pytest.mark.timeout(300)


@dataclass(frozen=True)
class GoBuild:
    """The built command and the GOPATH package tree it was built from."""

    binary: Path
    package_dir: Path
    env: dict[str, str]


@pytest.fixture(scope="session")
def go_build() -> GoBuild:
    """``clients/go/build.sh``, once: generates the contract's Go code and builds the command."""
    if shutil.which("go") is None:
        pytest.fail(f"this test needs Go from Debian's packages: apt-get install {GO_PACKAGES}")
    built = subprocess.run(
        [str(GO_DIR / "build.sh")], capture_output=True, text=True, timeout=280, check=False
    )
    assert built.returncode == 0, built.stderr
    binary = Path(built.stdout.strip().splitlines()[-1])
    gopath = binary.parents[1]
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{gopath}:/usr/share/gocode",
        "GOCACHE": str(gopath / "cache"),
    }
    package_dir = gopath / "src" / "github.com" / "omni-grpc" / "omni-grpc" / "clients" / "go"
    return GoBuild(binary=binary, package_dir=package_dir, env=env)


@pytest.fixture
async def served(
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Served]:
    truth = ServerTruth(monkeypatch)
    async with (
        serving(settings(api_keys=(API_KEY,))) as running,
        ChaosProxy("127.0.0.1", running.grpc_port, seed=16) as proxy,
    ):
        yield truth, running, proxy


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
class Run:
    """What the Go command said: its events, the session it named, and its saved reply."""

    events: list[pb.ConverseResponse]
    session_id: str
    reconnects: int
    reply: bytes
    reply_rate_hz: int


async def start(
    build: GoBuild, target: str, wav: Path, out: Path, *extra: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        str(build.binary),
        *("--target", target, "--api-key", API_KEY, "--wav", str(wav), "--out", str(out)),
        *extra,
        *("--chunk-ms", str(CHUNK_MS), "--timeout", "30s"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def finish(process: asyncio.subprocess.Process, out: Path) -> Run:
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    text = stderr.decode()
    assert process.returncode == 0, text
    session = re.search(r"^session (\S+) on ", text, re.MULTILINE)
    reconnects = re.search(r"^reconnects: (\d+), commands resent: \d+$", text, re.MULTILINE)
    assert session and reconnects, text
    with wave.open(str(out), "rb") as wav:
        reply, rate_hz = wav.readframes(wav.getnframes()), wav.getframerate()
    return Run(
        events=[json_format.Parse(line, pb.ConverseResponse()) for line in stdout.splitlines()],
        session_id=session.group(1),
        reconnects=int(reconnects.group(1)),
        reply=reply,
        reply_rate_hz=rate_hz,
    )


def kind(event: pb.ConverseResponse) -> str:
    return str(event.WhichOneof("event"))


def assert_server_agrees(truth: ServerTruth, run: Run, sent: bytes) -> str:
    """Checks the run against the server's record; returns the session id."""
    assert truth.opened == [run.session_id]  # resumed every time, never reopened
    session_id = run.session_id
    # The engine got every command once, numbered 1, 2, 3 … and every chunk in order.
    commands = truth.engine_input[session_id]
    assert [c.client_seq for c in commands] == list(range(1, len(commands) + 1))
    chunks = math.ceil(len(sent) / CHUNK_BYTES)
    kinds = [c.WhichOneof("command") for c in commands]
    assert kinds[: chunks + 1] == ["append_input_audio"] * chunks + ["commit_input_audio"]
    assert b"".join(c.append_input_audio.audio for c in commands[:chunks]) == sent
    # The client printed every journaled event once, in order, each exactly as journaled.
    journal = truth.events(session_id)
    numbered = [e for e in run.events if e.seq]
    assert [e.seq for e in numbered] == list(range(1, len(journal) + 1))
    assert numbered == journal
    assert kind(numbered[-1]) == "session_closed"
    # The saved reply is the audio the server journaled: the loopback engine says the input
    # back, so it is as long as the input, at the output rate.
    assert run.reply == truth.reply_audio(session_id)
    rates = {
        e.output_audio_delta.sample_rate_hz for e in journal if kind(e) == "output_audio_delta"
    }
    assert rates == {run.reply_rate_hz}
    assert len(run.reply) // 2 == len(sent) // 2 * run.reply_rate_hz // RATE_HZ
    return session_id


async def test_uncut_run_matches_the_server(
    go_build: GoBuild, served: Served, tmp_path: Path
) -> None:
    truth, running, proxy = served
    sent = gliding_tone(tmp_path / "in.wav", 1.0)
    process = await start(go_build, proxy.target, tmp_path / "in.wav", tmp_path / "reply.wav")
    run = await finish(process, tmp_path / "reply.wav")
    session_id = assert_server_agrees(truth, run, sent)
    assert proxy.stats.cuts == 0
    assert truth.resumes[session_id] == 0 and run.reconnects == 0
    assert [kind(e) for e in run.events if not e.seq] == ["session_created"]
    assert len(running.registry) == 0  # closed, and let go


async def test_cuts_during_upload_and_reply_lose_and_double_nothing(
    go_build: GoBuild, served: Served, tmp_path: Path
) -> None:
    truth, running, proxy = served
    sent = gliding_tone(tmp_path / "in.wav", 2.0)
    proxy.cut_after_bytes(UPLOAD_CUT_BYTES, direction="up")
    process = await start(go_build, proxy.target, tmp_path / "in.wav", tmp_path / "reply.wav")
    await eventually(lambda: proxy.stats.cuts >= 1, timeout_s=20)
    proxy.cut_after_bytes(REPLY_CUT_BYTES, direction="down")
    run = await finish(process, tmp_path / "reply.wav")
    session_id = assert_server_agrees(truth, run, sent)
    assert proxy.stats.cuts >= 2, "the reply was never cut"
    # The first cut fell inside the upload (audio still to send), the second inside the reply:
    # some of its audio came before the last resume, and its end after.
    upload_cut_at = truth.input_at_resume[session_id][0]  # commands in when the first resume came
    assert upload_cut_at < math.ceil(len(sent) / CHUNK_BYTES)
    last_resume = max(i for i, e in enumerate(run.events) if kind(e) == "session_resumed")
    before, after = run.events[:last_resume], run.events[last_resume:]
    assert "output_audio_delta" in [kind(e) for e in before]
    assert "response_done" in [kind(e) for e in after]
    # Each cut was followed by a resume the server granted, and the client saw each one.
    resumed = [e for e in run.events if kind(e) == "session_resumed"]
    assert truth.resumes[session_id] == len(resumed) == run.reconnects >= 2
    assert len(running.registry) == 0


async def test_a_resume_sends_the_route_back(
    go_build: GoBuild, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A server started with a routing key (``--route``): the client keeps the key that
    session_created names, and every resume after a cut presents it (``x-omni-route``), so a
    proxy in front of several replicas would take it to this one."""
    truth = ServerTruth(monkeypatch)
    sent = gliding_tone(tmp_path / "in.wav", 1.0)
    async with (
        serving(settings(api_keys=(API_KEY,), route="r7")) as running,
        ChaosProxy("127.0.0.1", running.grpc_port, seed=18) as proxy,
    ):
        proxy.cut_after_bytes(REPLY_CUT_BYTES // 2, direction="down")
        process = await start(go_build, proxy.target, tmp_path / "in.wav", tmp_path / "reply.wav")
        run = await finish(process, tmp_path / "reply.wav")
    session_id = assert_server_agrees(truth, run, sent)
    assert truth.resumes[session_id] == run.reconnects >= 1
    # The open went anywhere; every later call went to r7.
    assert (
        truth.call_routes[0] == "" and truth.call_routes[1:] == ["r7"] * truth.resumes[session_id]
    )


async def test_a_wrong_key_fails_with_the_servers_reason(
    go_build: GoBuild, served: Served, tmp_path: Path
) -> None:
    truth, _, proxy = served
    gliding_tone(tmp_path / "in.wav", 0.2)
    process = await asyncio.create_subprocess_exec(
        str(go_build.binary),
        *("--target", proxy.target, "--api-key", "not-the-key", "--wav", str(tmp_path / "in.wav")),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 1
    assert "code = Unauthenticated" in stderr.decode() and stdout == b""
    assert truth.opened == []


async def test_tls_run_with_a_pinned_certificate(
    go_build: GoBuild, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    truth = ServerTruth(monkeypatch)
    cert, key = self_signed_certificate(tmp_path)
    tls = settings(api_keys=(API_KEY,), tls_cert_file=str(cert), tls_key_file=str(key))
    sent = gliding_tone(tmp_path / "in.wav", 0.5)
    async with serving(tls) as running:
        process = await start(
            go_build, running.target, tmp_path / "in.wav", tmp_path / "reply.wav", "--ca", str(cert)
        )
        run = await finish(process, tmp_path / "reply.wav")
    assert_server_agrees(truth, run, sent)


def test_go_sources_are_gofmt_clean_vetted_and_pass_their_tests(go_build: GoBuild) -> None:
    unformatted = subprocess.run(
        ["gofmt", "-l", str(GO_DIR)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert unformatted == "", f"gofmt would change: {unformatted}"
    for command in (["go", "vet", "./..."], ["go", "test", "./..."]):
        checked = subprocess.run(
            command,
            cwd=go_build.package_dir,
            env=go_build.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
