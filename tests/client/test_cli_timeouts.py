"""The connection timeouts of ``serve`` and ``bridge``: flags, environment, file, and effect."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest

from omni_cli import build_parser
from omni_cli.config import (
    ConfigError,
    ServeSettings,
    resolve_bridge_settings,
    resolve_serve_settings,
)
from omni_cli.launch import start_service
from tests.serving import settings


def test_serve_timeouts_default_and_layer(tmp_path: Path) -> None:
    defaults = resolve_serve_settings(build_parser().parse_args(["serve"]), {})
    assert defaults.server.handshake_timeout_s == 10.0
    assert defaults.server.max_connection_idle_s == 300.0
    assert defaults.bridge.send_deadline_s == 10.0
    config = tmp_path / "omni.toml"
    config.write_text("handshake_timeout_s = 4\nmax_connection_idle_s = 60\nsend_deadline_s = 3\n")
    args = build_parser().parse_args(["serve", "--config", str(config), "--send-deadline-s", "2"])
    resolved = resolve_serve_settings(args, {"OMNI_GRPC_MAX_CONNECTION_IDLE_S": "30"})
    assert resolved.server.handshake_timeout_s == 4.0  # the file
    assert resolved.server.max_connection_idle_s == 30.0  # the environment beats the file
    assert resolved.bridge.send_deadline_s == 2.0  # the flag beats both


def test_bridge_timeouts() -> None:
    target = ["bridge", "--grpc-target", "10.0.0.1:50051"]
    bare = resolve_bridge_settings(build_parser().parse_args(target), {})
    assert (bare.bridge.header_timeout_s, bare.bridge.send_deadline_s) == (10.0, 10.0)
    flags = ["--handshake-timeout-s", "2.5", "--send-deadline-s", "1"]
    flagged = resolve_bridge_settings(build_parser().parse_args([*target, *flags]), {})
    assert (flagged.bridge.header_timeout_s, flagged.bridge.send_deadline_s) == (2.5, 1.0)


@pytest.mark.parametrize("flags", [["--send-deadline-s", "0"], ["--handshake-timeout-s", "-1"]])
def test_timeouts_must_be_positive(flags: list[str]) -> None:
    with pytest.raises(ConfigError, match="must be positive"):
        resolve_serve_settings(build_parser().parse_args(["serve", *flags]), {})
    bridge = ["bridge", "--grpc-target", "h:1", *flags]
    with pytest.raises(ConfigError, match="must be positive"):
        resolve_bridge_settings(build_parser().parse_args(bridge), {})


async def seconds_until_closed(port: int, first_bytes: bytes) -> float:
    started = time.monotonic()  # before the connection: the server's timer starts at accept
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(first_bytes)
    try:
        async with asyncio.timeout(5.0):
            await reader.read()  # until the server closes (gRPC says GOAWAY first)
        return time.monotonic() - started
    finally:
        writer.close()


async def test_serve_closes_silent_connections_on_both_ports() -> None:
    server = dataclasses.replace(settings(), handshake_timeout_s=0.5)
    service = await start_service(ServeSettings(server=server, http_port=0))
    try:
        assert service.http_port is not None
        grpc_s, http_s = await asyncio.gather(
            seconds_until_closed(service.server.grpc_port, b""),
            seconds_until_closed(service.http_port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
        )
    finally:
        await service.stop()
    assert 0.4 <= grpc_s < 2.5 and 0.4 <= http_s < 2.5, (grpc_s, http_s)
