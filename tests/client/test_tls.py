"""TLS: the client verifies the server against given roots, and talks only over TLS to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_grpc.client import ClientOptions, ConnectionLost, DuplexClient, ReconnectPolicy
from omni_grpc.server.app import RunningServer
from omni_grpc.server.settings import ServerSettings
from tests.client.conftest import OPTIONS, collect_until, settings
from tests.conftest import starts_processes
from tests.serving import self_signed_certificate

ONE_SHOT = ClientOptions(open_retry=ReconnectPolicy(max_attempts=1))


@pytest.fixture(scope="module")
@starts_processes
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def server_settings(certificate: tuple[Path, Path]) -> ServerSettings:
    """The shared ``server`` serves TLS only, with the certificate."""
    cert, key = certificate
    return settings(tls_cert_file=str(cert), tls_key_file=str(key))


@pytest.fixture
def tls_server(
    server: RunningServer, certificate: tuple[Path, Path]
) -> tuple[RunningServer, bytes]:
    return server, certificate[0].read_bytes()


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
