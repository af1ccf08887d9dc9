"""The local cluster starts on a busy machine: a port chosen free may be taken before HAProxy
binds it (another process's outgoing connection takes it as its ephemeral port), and the start
is then tried again on other ports instead of failing the test that needed a cluster."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from omni_cli import cluster_child
from omni_cli.cluster import free_port
from tests.cluster.local import LocalCluster


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port some other process listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_a_start_that_lost_its_port_is_tried_again_on_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken_port: int
) -> None:
    chosen = iter([taken_port, taken_port])  # the first start's two ports: both taken
    monkeypatch.setattr(cluster_child, "free_port", lambda: next(chosen, 0) or free_port())
    local = LocalCluster(tmp_path, replicas=1)
    try:
        local.wait_ready()
        assert taken_port not in (local.grpc_port, local.http_port)
        assert str(local.grpc_port) in local.target
        assert b"Address already in use" in local.log_path.read_bytes()
    finally:
        local.stop()
