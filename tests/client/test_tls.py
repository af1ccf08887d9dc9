"""TLS: the client verifies the server against given roots, and talks only over TLS to it."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from omni_grpc.client import ClientOptions, ConnectionLost, DuplexClient, ReconnectPolicy
from omni_grpc.server.app import RunningServer, start_server
from tests.client.conftest import OPTIONS, collect_until, settings

ONE_SHOT = ClientOptions(open_retry=ReconnectPolicy(max_attempts=1))


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 and localhost, made with the openssl tool."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def tls_server(certificate: tuple[Path, Path]) -> AsyncIterator[tuple[RunningServer, bytes]]:
    cert, key = certificate
    running = await start_server(settings(tls_cert_file=str(cert), tls_key_file=str(key)))
    yield running, cert.read_bytes()
    await running.stop()


async def test_tls_session_with_pinned_roots(tls_server: tuple[RunningServer, bytes]) -> None:
    server, roots = tls_server
    client = await DuplexClient.connect(server.target, root_certificates=roots, options=OPTIONS)
    await client.heartbeat()
    assert [e.WhichOneof("event") for e in await collect_until(client, "heartbeat_ack")] == [
        "heartbeat_ack"
    ]
    await client.close()


async def test_plaintext_or_untrusted_clients_get_no_session(
    tls_server: tuple[RunningServer, bytes],
) -> None:
    server, _ = tls_server
    with pytest.raises(ConnectionLost):
        await DuplexClient.connect(server.target, options=ONE_SHOT)  # no TLS at all
    with pytest.raises(ConnectionLost):
        await DuplexClient.connect(server.target, tls=True, options=ONE_SHOT)  # system roots
    assert len(server.registry) == 0
