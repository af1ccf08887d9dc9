"""The cluster the routing tests share: three loopback replicas, started once for the package
(tests/cluster/test_routing.py runs first; test_routing_bridge.py ends by killing a replica)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.local import LocalCluster


@pytest.fixture(scope="package")
def three_replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(Path(tmp_path_factory.mktemp("cluster")))
    try:
        yield local.wait_ready()
    finally:
        local.stop()
