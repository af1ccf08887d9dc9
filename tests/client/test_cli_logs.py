"""The logs of real ``omni-grpc serve`` processes: JSON lines with session ids, no secrets, and
no gRPC fork warnings when the embedded engine starts espeak-ng."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
import pytest

from omni_cli import ConfigError, build_parser, resolve_bridge_settings, resolve_serve_settings
from omni_grpc.client import DuplexClient

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "omni_cli"]
API_KEY = "sk-test-log-secret-8d1f0c"
FORK_WARNING = "fork() handlers"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _child_env(**extra: str) -> dict[str, str]:
    """Our environment without a fork setting inherited from this test process: the serve
    process under test must make its own."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


@contextlib.contextmanager
def serve_process(log: Path, *flags: str, env: dict[str, str]) -> Iterator[str]:
    """``omni-grpc serve`` with its stderr in ``log``; yields the gRPC target, then SIGTERMs."""
    with (
        log.open("w") as stderr,
        subprocess.Popen(
            [*CLI, "serve", "--grpc-port", "0", "--shutdown-grace-s", "1", *flags],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
        ) as server,
    ):
        try:
            assert server.stdout is not None
            banner = server.stdout.readline()
            target = re.search(r"127\.0\.0\.1:\d+", banner)
            assert target, banner
            yield target.group(0)
        finally:
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=20) == 0


def _pcm16(ms: int, rate_hz: int) -> bytes:
    t = np.arange(rate_hz * ms // 1000) / rate_hz
    return (0.3 * 32767 * np.sin(2 * np.pi * 300 * t)).astype("<i2").tobytes()


async def _grpc_conversation(target: str) -> tuple[set[str], set[str]]:
    """A turn, a GetSession, a detach and a takeover by a second client; (ids, tokens)."""
    first = await DuplexClient.connect(target, api_key=API_KEY)
    await first.append_audio(_pcm16(300, 16000))
    await first.commit(create_response=True)
    async for event in first.events():
        if event.WhichOneof("event") == "response_done":
            break
    await first.get_session()  # the token travels in this call's metadata
    handle = await first.detach()
    second = await DuplexClient.resume(
        target, handle.session_id, handle.resume_token, handle.last_seq, api_key=API_KEY
    )
    tokens = {handle.resume_token, second.resume_handle().resume_token}
    await second.close()
    return {handle.session_id}, tokens


async def _bridge_conversation(http_port: int) -> tuple[set[str], set[str]]:
    """A turn over the websocket bridge, then a resume on a second socket; (ids, tokens)."""
    # It resumes, so it asks for the duplex extensions (the resume token among them).
    url = f"http://127.0.0.1:{http_port}/v1/realtime?model=loopback&extensions=1"
    headers = {"Authorization": f"Bearer {API_KEY}"}
    audio = base64.b64encode(_pcm16(300, 24000)).decode()
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url, headers=headers) as ws:
            created: dict[str, Any] = await ws.receive_json(timeout=10)
            assert created["type"] == "session.created", created
            await ws.send_json({"type": "input_audio_buffer.append", "audio": audio})
            await ws.send_json({"type": "input_audio_buffer.commit", "create_response": True})
            while (await ws.receive_json(timeout=10))["type"] != "response.done":
                pass
        resume = {
            "type": "session.resume",
            "session_id": created["session"]["id"],
            "resume_token": created["resume_token"],
        }
        async with http.ws_connect(url + "&resume=1", headers=headers) as ws:
            await ws.send_json(resume)
            resumed: dict[str, Any] = await ws.receive_json(timeout=10)
            while resumed["type"] != "session.resumed":
                resumed = await ws.receive_json(timeout=10)
            await ws.send_json({"type": "session.close"})
    return {created["session"]["id"]}, {created["resume_token"], resumed["resume_token"]}


@pytest.mark.subprocess
async def test_json_logs_carry_session_ids_and_no_secrets(tmp_path: Path) -> None:
    log, http_port = tmp_path / "serve.log", _free_port()
    flags = ["--http-port", str(http_port), "--engine", "loopback", "--engine-option", "pace=fast"]
    flags += ["--log-level", "debug", "--log-format", "json"]
    with serve_process(log, *flags, env=_child_env(OMNI_GRPC_API_KEYS=API_KEY)) as target:
        grpc_ids, grpc_tokens = await _grpc_conversation(target)
        bridge_ids, bridge_tokens = await _bridge_conversation(http_port)
    text = log.read_text()
    lines = [orjson.loads(line) for line in text.splitlines()]  # every line parses
    assert lines and all({"time", "level", "logger", "message"} <= set(e) for e in lines)
    for entry in lines:
        named = re.findall(r"sess_[0-9a-f]+", entry["message"])
        assert not named or entry.get("session_id") == named[0], entry
    logged = {e["session_id"] for e in lines if "session_id" in e}
    assert "" not in logged
    assert grpc_ids | bridge_ids <= logged
    events = {(e["session_id"], e["message"].split(" ", 2)[-1]) for e in lines if "session_id" in e}
    for session_id in grpc_ids | bridge_ids:
        assert (session_id, "opened") in events and (session_id, "ended (CLOSED)") in events
        assert any(s == session_id and m.startswith("resumed") for s, m in events)
    assert API_KEY not in text
    for token in grpc_tokens | bridge_tokens:
        assert token and token not in text


@pytest.mark.subprocess
def test_espeak_starts_leave_no_fork_warning(tmp_path: Path) -> None:
    """The embedded engine speaks through espeak-ng subprocesses while gRPC calls are live."""
    log, wav, reply = tmp_path / "serve.log", tmp_path / "hello.wav", tmp_path / "reply.wav"
    subprocess.run(["espeak-ng", "-w", str(wav), "Hello there. How are you?"], check=True)
    flags = ["--http-port", "0", "--engine", "embedded", "--engine-option", "responder=echo"]
    env = _child_env()
    with serve_process(log, *flags, "--engine-option", "pace=fast", env=env) as target:
        talk = subprocess.run(
            [*CLI, "talk", "--fast", "--target", target, "--out", str(reply), str(wav)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    assert talk.returncode == 0, talk.stderr
    assert "You said" in talk.stdout and reply.stat().st_size > 44  # espeak-ng spoke
    text = log.read_text()
    assert "session sess_" in text  # the log was captured
    assert FORK_WARNING not in text and FORK_WARNING not in talk.stderr


def test_log_format_is_read_from_flags_environment_and_file(tmp_path: Path) -> None:
    def serve(*flags: str, env: dict[str, str] | None = None) -> str:
        args = build_parser().parse_args(["serve", *flags])
        return resolve_serve_settings(args, env or {}).log_format

    config = tmp_path / "omni.toml"
    config.write_text('log_format = "json"\n')
    assert serve() == "text"
    assert serve(env={"OMNI_GRPC_CONFIG": str(config)}) == "json"
    assert serve("--log-format", "text", env={"OMNI_GRPC_LOG_FORMAT": "json"}) == "text"
    with pytest.raises(ConfigError, match="log_format must be one of text, json"):
        serve(env={"OMNI_GRPC_LOG_FORMAT": "xml"})
    bridge = build_parser().parse_args(["bridge", "--grpc-target", "h:1", "--log-format", "json"])
    assert resolve_bridge_settings(bridge, {}).log_format == "json"
    talk = build_parser().parse_args(["talk", "in.wav"])
    assert talk.log_format == "text"
