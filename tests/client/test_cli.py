"""The omni-grpc command line: settings of serve and bridge, and real serve, talk, bridge and
bench processes end to end."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from omni_cli import (
    ConfigError,
    build_parser,
    main,
    resolve_bridge_settings,
    resolve_serve_settings,
)
from omni_grpc.client.wavio import read_audio
from tests.serving import self_signed_certificate, serving, settings

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "omni_cli"]


def serve_args(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *flags])


def bridge_args(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["bridge", "--grpc-target", "10.0.0.1:50051", *flags])


def test_serve_settings_layer_file_then_env_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "omni.toml"
    config.write_text(
        'host = "0.0.0.0"\ngrpc_port = 6000\nhttp_port = 0\n'
        'engine = "loopback"\napi_keys = ["from-file"]\n'
        '[engine_options]\npace = "fast"\nchunk_ms = "40"\n'
        "[limits]\ndisconnect_grace_s = 3\nmax_sessions = 9\n"
    )
    env = {
        "OMNI_GRPC_CONFIG": str(config),
        "OMNI_GRPC_GRPC_PORT": "6001",
        "OMNI_GRPC_API_KEYS": "env-a, env-b",
        "OMNI_GRPC_ENGINE_OPTIONS": "speed=2",
    }
    resolved = resolve_serve_settings(
        serve_args("--grpc-port", "6002", "--engine-option", "chunk_ms=20", "--log-level", "debug"),
        env,
    )
    server = resolved.server
    assert server.host == "0.0.0.0"  # the file
    assert server.grpc_port == 6002  # the flag beats the environment and the file
    assert resolved.http_port is None  # 0 turns the bridge off
    assert server.api_keys == ("env-a", "env-b")  # the environment beats the file
    assert server.engine_options == {"pace": "fast", "chunk_ms": "20", "speed": "2"}
    assert server.limits.disconnect_grace_s == 3.0 and server.limits.max_sessions == 9
    assert resolved.log_level == "debug"
    flagged = resolve_serve_settings(
        serve_args("--max-sessions", "5", "--api-key", "k1", "--api-key", "k2"), env
    ).server
    assert flagged.limits.max_sessions == 5 and flagged.api_keys == ("k1", "k2")


def test_serve_defaults_without_any_source() -> None:
    resolved = resolve_serve_settings(serve_args(), {})
    server = resolved.server
    assert (server.host, server.grpc_port, resolved.http_port) == ("127.0.0.1", 50051, 8080)
    assert server.api_keys == () and resolved.log_level == "info"
    assert server.engine == "embedded"  # as the README says: the CPU speech loop


def test_bridge_settings_take_keys_from_flags_or_the_environment() -> None:
    env = {"OMNI_GRPC_API_KEYS": "a, b", "OMNI_GRPC_SERVICE_KEY": "svc"}
    from_env = resolve_bridge_settings(bridge_args(), env)
    assert from_env.grpc_target == "10.0.0.1:50051"
    assert (from_env.bridge.host, from_env.bridge.port) == ("127.0.0.1", 8080)
    assert from_env.bridge.api_keys == ("a", "b") and from_env.bridge.service_key == "svc"
    flagged = resolve_bridge_settings(
        bridge_args("--api-key", "c", "--service-key", "s2", "--port", "0"), env
    )
    flagged_bridge = flagged.bridge
    assert flagged_bridge.api_keys == ("c",) and flagged_bridge.service_key == "s2"
    assert flagged_bridge.port == 0
    bare = resolve_bridge_settings(bridge_args(), {})
    assert bare.bridge.api_keys == () and bare.bridge.service_key == ""
    assert not bare.bridge.grpc_plaintext


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--port", "70000"], "port must be in 0..65535"),
        (["--tls-cert", "cert.pem"], "both a certificate and its key"),
        (["--grpc-plaintext", "--grpc-root-cert", "ca.pem"], "contradict"),
        (["--bridge-workers", "0"], "bridge_workers must be at least 1"),
    ],
)
def test_bridge_settings_refuse_bad_values(flags: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_bridge_settings(bridge_args(*flags), {})


def test_bridge_workers_come_from_flags_or_the_environment() -> None:
    assert resolve_serve_settings(serve_args(), {}).bridge_workers == 1
    environ = {"OMNI_GRPC_BRIDGE_WORKERS": "3"}
    assert resolve_serve_settings(serve_args(), environ).bridge_workers == 3
    flagged = serve_args("--bridge-workers", "2")
    assert resolve_serve_settings(flagged, environ).bridge_workers == 2
    assert resolve_bridge_settings(bridge_args("--bridge-workers", "4"), {}).bridge_workers == 4


def test_the_bridge_multiplexes_unless_told_not_to() -> None:
    assert resolve_bridge_settings(bridge_args(), {}).bridge.multiplex
    assert not resolve_bridge_settings(bridge_args("--no-multiplex"), {}).bridge.multiplex


def test_webrtc_ice_settings_reach_the_bridge_from_flags_or_the_environment() -> None:
    flags = ("--webrtc-address", "192.168.1.5", "--ice-server", "stun:stun.example:3478")
    bridge = resolve_bridge_settings(bridge_args(*flags), {}).bridge
    assert bridge.webrtc_host_addresses == ("192.168.1.5",)
    assert bridge.webrtc_ice_servers == ("stun:stun.example:3478",)
    served = resolve_serve_settings(serve_args(*flags), {}).bridge
    assert (served.webrtc_host_addresses, served.webrtc_ice_servers) == (
        bridge.webrtc_host_addresses,
        bridge.webrtc_ice_servers,
    )
    env = {
        "OMNI_GRPC_ICE_SERVERS": "stun:a:1,turn:u:p@b:2",
        "OMNI_GRPC_WEBRTC_ADDRESSES": "10.0.0.2",
    }
    from_env = resolve_serve_settings(serve_args(), env).bridge
    assert from_env.webrtc_ice_servers == ("stun:a:1", "turn:u:p@b:2")
    assert from_env.webrtc_host_addresses == ("10.0.0.2",)


def test_bridge_needs_a_target(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bridge"])
    assert exited.value.code == 2
    assert "--grpc-target" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--grpc-port", "70000"], {}, "grpc_port must be in 0..65535"),
        (["--engine-option", "novalue"], {}, "expected KEY=VALUE"),
        (["--tls-cert", "cert.pem"], {}, "both a certificate and its key"),
        ([], {"OMNI_GRPC_LOG_LEVEL": "loud"}, "log_level must be one of"),
        ([], {"OMNI_GRPC_HTTP_PORT": "web"}, "http_port must be a port number"),
        (["--max-sessions", "0"], {}, "every limit must be positive"),
        (["--config", "/nonexistent/omni.toml"], {}, "cannot read"),
        ([], {"OMNI_GRPC_BRIDGE_WORKERS": "two"}, "bridge_workers must be a whole number"),
    ],
)
def test_serve_settings_refuse_bad_values(
    flags: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_serve_settings(serve_args(*flags), env)


def test_config_file_with_unknown_keys_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "omni.toml"
    config.write_text("grpc_prot = 1\n")
    with pytest.raises(ConfigError, match=r"unknown setting.*grpc_prot"):
        resolve_serve_settings(serve_args("--config", str(config)), {})
    config.write_text("[limits]\nmax_sesions = 1\n")
    with pytest.raises(ConfigError, match=r"unknown limit.*max_sesions"):
        resolve_serve_settings(serve_args("--config", str(config)), {})
    config.write_text("grpc_port = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        resolve_serve_settings(serve_args("--config", str(config)), {})


def test_serve_exits_2_on_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--grpc-port", "-1"]) == 2
    assert "grpc_port must be in 0..65535" in capsys.readouterr().err


def test_talk_to_nothing_fails_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wav = _sine_wav(tmp_path / "in.wav", seconds=0.2)
    assert main(["talk", "--target", "127.0.0.1:1", "--fast", str(wav)]) == 1
    err = capsys.readouterr().err
    assert "cannot reach 127.0.0.1:1" in err and "Connection refused" in err


def test_talk_refuses_unusable_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not audio")
    assert main(["talk", str(text)]) == 2
    assert "not a PCM WAV file" in capsys.readouterr().err
    assert main(["talk", str(tmp_path / "missing.wav")]) == 2
    assert "No such file" in capsys.readouterr().err


def test_wav_input_is_mixed_down_and_resampled_when_needed(tmp_path: Path) -> None:
    stereo = tmp_path / "stereo.wav"
    left = (np.arange(3200) % 100 * 100).astype("<i2")
    with wave.open(str(stereo), "wb") as wav:
        wav.setnchannels(2)
        wav.setsampwidth(2)
        wav.setframerate(16000)
        wav.writeframes(np.stack([left, left], axis=1).tobytes())
    audio = read_audio(stereo)
    assert audio.rate_hz == 16000 and audio.pcm16 == left.tobytes()
    odd = tmp_path / "odd.raw"
    odd.write_bytes(np.zeros(11025, dtype="<i2").tobytes())
    resampled = read_audio(odd, raw_rate_hz=11025)  # a rate the protocol does not take
    assert resampled.rate_hz == 16000 and abs(resampled.duration_ms - 1000) < 1


@pytest.mark.subprocess
def test_bench_runs_the_packaged_benchmark() -> None:
    result = subprocess.run(
        [*CLI, "bench", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "--quick" in result.stdout and "raw grpc.aio echo" in result.stdout


@contextlib.asynccontextmanager
async def bridge_process(target: str, *flags: str, env: dict[str, str]) -> AsyncIterator[str]:
    """``omni-grpc bridge`` as a real process in front of ``target``; yields its realtime URL.

    On leaving, SIGTERM must end it cleanly.
    """
    bridge = await asyncio.create_subprocess_exec(
        *CLI,
        "bridge",
        "--grpc-target",
        target,
        "--port",
        "0",
        "--log-level",
        "warning",
        *flags,
        env={**os.environ, **env},
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert bridge.stdout is not None
        banner = (await asyncio.wait_for(bridge.stdout.readline(), 30)).decode()
        found = re.search(r"bridge on (http://127\.0\.0\.1:\d+)/ for (\S+)", banner)
        assert found, banner
        assert found[2] == target
        yield f"{found[1]}/v1/realtime?model=loopback"
        bridge.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(bridge.wait(), 20) == 0
    finally:
        if bridge.returncode is None:
            bridge.kill()
            await bridge.wait()


async def first_event(url: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """What a websocket client of the bridge hears first."""
    async with aiohttp.ClientSession() as http, http.ws_connect(url, headers=headers) as ws:
        event: dict[str, Any] = await asyncio.wait_for(ws.receive_json(), 10)
        return event


@pytest.mark.subprocess
async def test_bridge_command_relays_to_a_running_service() -> None:
    """The client's key opens the bridge; the bridge's own key opens the service."""
    async with (
        serving(settings(api_keys=("service-key",))) as service,
        bridge_process(
            service.target,
            "--api-key",
            "client-key",
            env={"OMNI_GRPC_SERVICE_KEY": "service-key"},
        ) as url,
    ):
        created = await first_event(url, {"Authorization": "Bearer client-key"})
        assert created["type"] == "session.created", created
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await first_event(url)  # refused before the upgrade
        assert refused.value.status == 401


@pytest.mark.subprocess
async def test_bridge_command_reaches_a_tls_service(tmp_path: Path) -> None:
    cert, key = self_signed_certificate(tmp_path)
    tls = settings(tls_cert_file=str(cert), tls_key_file=str(key))
    async with (
        serving(tls) as service,
        bridge_process(service.target, "--grpc-root-cert", str(cert), env={}) as url,
    ):
        created = await first_event(url)
        assert created["type"] == "session.created", created


@pytest.mark.slow
@pytest.mark.subprocess
def test_serve_and_talk_end_to_end(tmp_path: Path) -> None:
    wav = _speech_wav(tmp_path / "hello.wav")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        [
            *CLI,
            "serve",
            "--grpc-port",
            "0",
            "--http-port",
            "0",
            "--engine",
            "loopback",
            "--engine-option",
            "pace=fast",
            "--log-level",
            "warning",
            "--shutdown-grace-s",
            "1",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    ) as server:
        try:
            _talk_through(server, wav, tmp_path, env)
        finally:
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=20) == 0  # a clean drain and stop


def _talk_through(
    server: subprocess.Popen[str], wav: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    spoken = read_audio(wav)
    assert server.stdout is not None
    banner = server.stdout.readline()
    target = re.search(r"127\.0\.0\.1:\d+", banner)
    assert target, banner
    out = tmp_path / "reply.wav"
    talk = subprocess.run(
        [
            *CLI,
            "talk",
            "--target",
            target.group(0),
            "--chunk-ms",
            "40",
            "--out",
            str(out),
            str(wav),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert talk.returncode == 0, talk.stderr
    seconds = f"{spoken.duration_ms / 1000:.2f}"
    assert f"assistant: you said {seconds} seconds of audio" in talk.stdout
    turn = re.search(r"turn 1: ttft (\d+) ms \| ttfp (\d+) ms \| rtf ([\d.]+)", talk.stdout)
    assert turn, talk.stdout
    assert "input_committed" in talk.stdout and "response_done" in talk.stdout
    assert "sent " in talk.stderr and f"saved to {out}" in talk.stderr
    reply = read_audio(out)
    assert reply.rate_hz == 24000
    assert abs(reply.duration_ms - spoken.duration_ms) < 5  # loopback: the same audio


def _sine_wav(path: Path, *, seconds: float) -> Path:
    t = np.arange(int(22050 * seconds)) / 22050
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(22050)
        wav.writeframes((0.3 * 32767 * np.sin(2 * np.pi * 300 * t)).astype("<i2").tobytes())
    return path


def _speech_wav(path: Path) -> Path:
    """Real speech from espeak-ng where it is installed, else a tone of similar length."""
    if shutil.which("espeak-ng"):
        subprocess.run(
            ["espeak-ng", "-w", str(path), "Hello, this is the talk command."],
            check=True,
            timeout=30,
        )
        return path
    return _sine_wav(path, seconds=1.6)
