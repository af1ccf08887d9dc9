"""The Node client (clients/node, @grpc/grpc-js) against the real server, cut on purpose.

``stream_wav.mjs`` runs as a subprocess: it says a WAV file through a ChaosProxy to a real
server with the loopback engine, prints every event as a JSON line and saves the reply. One run
is cut twice (during the audio upload, then during the reply) and one is not. The verdict comes
from the server (tests/clients/server_truth.py), not from the client: one session was opened
and resumed, never reopened; every chunk reached the engine exactly once and in order; the
client printed every journaled event once, in order; the saved reply is the audio the server
journaled.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import shutil
import subprocess
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format

from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from tests.client.proxy import ChaosProxy
from tests.clients.server_truth import ServerTruth
from tests.serving import eventually, self_signed_certificate, serving, settings

NODE_DIR = Path(__file__).parents[2] / "clients" / "node"
API_KEY = "node-client-test-key"
RATE_HZ = 16000  # the engine's canonical input rate: the engine gets the very bytes sent
CHUNK_MS = 100
CHUNK_BYTES = RATE_HZ * CHUNK_MS // 1000 * 2
UPLOAD_CUT_BYTES = 12 * CHUNK_BYTES  # client-to-server bytes: about a third into the upload
REPLY_CUT_BYTES = 40_000  # server-to-client bytes after the first cut: inside the reply
RANDOM_CUT_MEAN_BYTES = 8_000


@pytest.fixture(scope="session")
def stream_wav() -> Path:
    """The Node command, with its locked packages installed once (npm ci)."""
    assert shutil.which("node") and shutil.which("npm"), "this test needs Node 20 and npm"
    if not (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            check=True,
            timeout=300,
        )
    return NODE_DIR / "stream_wav.mjs"


Served = tuple[ServerTruth, RunningServer, ChaosProxy]


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Served]:
    truth = ServerTruth(monkeypatch)
    async with (
        serving(settings(api_keys=(API_KEY,))) as running,
        ChaosProxy("127.0.0.1", running.grpc_port, seed=15) as proxy,
    ):
        yield truth, running, proxy


def speech_like(path: Path, seconds: float) -> bytes:
    """Writes a WAV of a gliding tone (no two chunks alike) and returns its samples."""
    t = np.arange(int(RATE_HZ * seconds)) / RATE_HZ
    tone = 0.3 * 32767 * np.sin(2 * math.pi * (200 + 150 * t) * t)
    samples = tone.astype("<i2").tobytes()
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE_HZ)
        wav.writeframes(samples)
    return samples


@dataclass
class Run:
    """What the Node command said: its exit status, events, summary and saved reply."""

    returncode: int
    events: list[dict[str, Any]]
    summary: dict[str, Any]
    stderr: str
    reply: bytes
    reply_rate_hz: int


async def start(
    script: Path, target: str, wav: Path, out: Path, *flags: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        "node",
        str(script),
        *("--target", target, "--api-key", API_KEY, "--wav", str(wav), "--out", str(out)),
        *flags,
        *("--chunk-ms", str(CHUNK_MS), "--timeout", "30"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def finish(process: asyncio.subprocess.Process, out: Path) -> Run:
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    text = stderr.decode()
    assert process.returncode == 0, text
    with wave.open(str(out), "rb") as wav:
        reply, rate_hz = wav.readframes(wav.getnframes()), wav.getframerate()
    return Run(
        returncode=process.returncode,
        events=[json.loads(line) for line in stdout.splitlines()],
        summary=json.loads(text.splitlines()[-1]),
        stderr=text,
        reply=reply,
        reply_rate_hz=rate_hz,
    )


def assert_server_agrees(truth: ServerTruth, run: Run, sent: bytes) -> str:
    """Checks the run against the server's record; returns the session id."""
    assert len(truth.opened) == 1, truth.opened  # resumed every time, never reopened
    session_id = truth.opened[0]
    assert run.summary["session_id"] == session_id
    # The engine got every command once, numbered 1, 2, 3 … and every chunk in order.
    commands = truth.engine_input[session_id]
    assert [c.client_seq for c in commands] == list(range(1, len(commands) + 1))
    kinds = [c.WhichOneof("command") for c in commands]
    chunks = math.ceil(len(sent) / CHUNK_BYTES)
    assert kinds[:chunks] == ["append_input_audio"] * chunks
    assert kinds[chunks] == "commit_input_audio"
    assert b"".join(c.append_input_audio.audio for c in commands[:chunks]) == sent
    # The client printed every journaled event once, in order, and nothing else numbered.
    journal = truth.events(session_id)
    numbered = [e for e in run.events if e["seq"]]
    assert [e["seq"] for e in numbered] == list(range(1, len(journal) + 1))
    for printed, journaled in zip(numbered, journal, strict=True):
        assert_same_event(printed, journaled)
    assert numbered[-1]["type"] == "session_closed"
    # The saved reply is the audio the server journaled: the loopback engine says the input
    # back, so it is as long as the input, at the output rate.
    assert run.reply == truth.reply_audio(session_id)
    assert run.reply_rate_hz == journal_rate(journal)
    assert len(run.reply) // 2 == len(sent) // 2 * run.reply_rate_hz // RATE_HZ
    return session_id


def assert_same_event(printed: dict[str, Any], journaled: pb.ConverseResponse) -> None:
    """Checks a printed event against the journaled one, field for field: every field the
    server set has the same value in the print (64-bit numbers as numbers, audio as its size)."""
    kind = journaled.WhichOneof("event")
    assert printed["type"] == kind
    fields = json_format.MessageToDict(journaled, preserving_proto_field_name=True)
    for path, value in leaves(fields):
        shown: Any = printed
        for key in path:
            shown = shown[key]
        if isinstance(shown, dict) and "bytes" in shown:  # bytes print as their count
            assert shown["bytes"] == len(base64.b64decode(value)), path
        elif isinstance(shown, int) and isinstance(value, str):  # 64-bit: a string in JSON
            assert shown == int(value), path
        else:
            assert shown == value, (path, shown, value)


def leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """The scalar values of a JSON-like tree, each with its path of keys and indexes."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in leaves(item, (*path, key))]
    if isinstance(value, list):
        return [leaf for index, item in enumerate(value) for leaf in leaves(item, (*path, index))]
    return [(path, value)]


def journal_rate(journal: list[pb.ConverseResponse]) -> int:
    rates = {
        e.output_audio_delta.sample_rate_hz for e in journal if e.HasField("output_audio_delta")
    }
    assert len(rates) == 1, rates
    return rates.pop()


def test_node_unit_tests_pass(stream_wav: Path) -> None:
    """The client's own tests (node:test): bookkeeping and WAV reading and writing."""
    result = subprocess.run(
        ["node", "--test", "test/"], cwd=NODE_DIR, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "# fail 0" in result.stdout and "# pass 0" not in result.stdout


async def test_uncut_run_matches_the_server(
    stream_wav: Path, served: Served, tmp_path: Path
) -> None:
    truth, running, proxy = served
    sent = speech_like(tmp_path / "in.wav", 1.0)
    process = await start(stream_wav, proxy.target, tmp_path / "in.wav", tmp_path / "reply.wav")
    run = await finish(process, tmp_path / "reply.wav")
    session_id = assert_server_agrees(truth, run, sent)
    assert proxy.stats.cuts == 0
    assert truth.resumes[session_id] == 0 and run.summary["reconnects"] == 0
    assert [e["type"] for e in run.events if not e["seq"]] == ["session_created"]
    assert len(running.registry) == 0  # closed, and let go


async def test_cuts_during_upload_and_reply_lose_and_double_nothing(
    stream_wav: Path, served: Served, tmp_path: Path
) -> None:
    truth, running, proxy = served
    sent = speech_like(tmp_path / "in.wav", 2.0)
    proxy.cut_after_bytes(UPLOAD_CUT_BYTES, direction="up")
    process = await start(stream_wav, proxy.target, tmp_path / "in.wav", tmp_path / "reply.wav")
    await eventually(lambda: proxy.stats.cuts >= 1, timeout_s=20)
    proxy.cut_after_bytes(REPLY_CUT_BYTES, direction="down")
    run = await finish(process, tmp_path / "reply.wav")
    session_id = assert_server_agrees(truth, run, sent)
    assert proxy.stats.cuts >= 2, "the reply was never cut"
    # The first cut fell inside the upload (audio still to send), the second inside the reply.
    upload_cut_at = truth.input_at_resume[session_id][0]  # commands in when the first resume came
    assert upload_cut_at < math.ceil(len(sent) / CHUNK_BYTES)
    reply_cut = [e for e in run.events if e["type"] == "session_resumed"][-1]
    done_seq = next(e["seq"] for e in run.events if e["type"] == "response_done")
    last_before = max(e["seq"] for e in run.events[: run.events.index(reply_cut)] if e["seq"])
    assert last_before < done_seq
    assert "output_audio_delta" in [e["type"] for e in run.events[: run.events.index(reply_cut)]]
    # Each cut was followed by a resume the server granted, and the client saw each one.
    resumed = [e for e in run.events if e["type"] == "session_resumed"]
    assert truth.resumes[session_id] == len(resumed) == run.summary["reconnects"] >= 2
    # The upload cut fell inside a chunk's message, so that chunk had to be sent again (and,
    # above, still reached the engine exactly once).
    assert run.summary["resent_commands"] >= 1
    assert len(running.registry) == 0


async def test_a_resume_sends_the_route_back(
    stream_wav: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A server started with a routing key (``--route``): the client keeps the key that
    session_created names, and every resume after a cut presents it (``x-omni-route``), so a
    proxy in front of several replicas would take it to this one."""
    truth = ServerTruth(monkeypatch)
    sent = speech_like(tmp_path / "in.wav", 1.0)
    async with (
        serving(settings(api_keys=(API_KEY,), route="r7")) as running,
        ChaosProxy("127.0.0.1", running.grpc_port, seed=17) as proxy,
    ):
        proxy.cut_after_bytes(REPLY_CUT_BYTES // 2, direction="down")
        process = await start(
            stream_wav, proxy.target, tmp_path / "in.wav", tmp_path / "reply.wav", "--fast"
        )
        run = await finish(process, tmp_path / "reply.wav")
    session_id = assert_server_agrees(truth, run, sent)
    assert truth.resumes[session_id] == run.summary["reconnects"] >= 1
    assert run.summary["route"] == "r7"
    # The open went anywhere; every later call went to r7.
    assert (
        truth.call_routes[0] == "" and truth.call_routes[1:] == ["r7"] * truth.resumes[session_id]
    )


async def test_random_cuts_anywhere_lose_and_double_nothing(
    stream_wav: Path, served: Served, tmp_path: Path
) -> None:
    truth, running, proxy = served
    sent = speech_like(tmp_path / "in.wav", 2.0)
    # Cuts after random byte counts: mid-message, mid-resume (the second budget is 93 bytes),
    # anywhere but the open. The proxy's seed makes the first budget 26874 bytes, well past it:
    # an open cut after the server created the session cannot be told from one that never
    # arrived, so the client's retry would leave a second session behind (as in the chaos test).
    proxy.cut_randomly(mean_bytes=RANDOM_CUT_MEAN_BYTES)
    process = await start(stream_wav, proxy.target, tmp_path / "in.wav", tmp_path / "reply.wav")
    run = await finish(process, tmp_path / "reply.wav")
    proxy.cut_randomly(None)
    assert_server_agrees(truth, run, sent)
    assert proxy.stats.cuts >= 5, proxy.stats  # about 10 on this seed
    assert len(running.registry) == 0


async def test_tls_with_the_servers_certificate_as_root(
    stream_wav: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    truth = ServerTruth(monkeypatch)
    cert, key = self_signed_certificate(tmp_path)
    sent = speech_like(tmp_path / "in.wav", 0.5)
    tls = settings(api_keys=(API_KEY,), tls_cert_file=str(cert), tls_key_file=str(key))
    async with serving(tls) as running:
        process = await start(
            stream_wav,
            running.target,
            tmp_path / "in.wav",
            tmp_path / "reply.wav",
            *("--root-cert", str(cert)),
        )
        run = await finish(process, tmp_path / "reply.wav")
    assert_server_agrees(truth, run, sent)
