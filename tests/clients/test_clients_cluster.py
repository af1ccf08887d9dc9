"""The Node and Go clients behind HAProxy in front of three replicas (scripts/cluster's runner,
Redis, durable sessions): the replica holding the session is drained (SIGTERM) while the client
says a WAV file, and the client carries on at the peer that adopted it, with every event once
and in order, and the peer's routing key (from ``session_resumed``) as the one it now sends.

Each test drains the owner of its own session, so the two leave one replica of three. The
clients' own tests (test_clients.py) judge every byte against the server
and check that a resume presents the routing key; here it is the real proxy and the move: the
key a client keeps at the end is the adopter's. Whether a resume met a refusal on the way (a
draining owner answers ``session_elsewhere`` until HAProxy takes it out) depends on timing, so
the relayed-refusal path is not asserted here (its unit tests are in each client).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

from omni_grpc.wire import pb
from tests.clients.driver import GoBuild
from tests.cluster.local import LOOPBACK, LocalCluster, wait_for

RATE_HZ = 16000
SECONDS = 4.0  # said at real-time pace: the drain lands while the audio goes out

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    tmp_path = Path(tmp_path_factory.mktemp("cluster"))
    local = LocalCluster(tmp_path, replicas=3, serve_args=(*LOOPBACK, "--durability", "sync"))
    try:
        yield local.wait_ready()
    finally:
        local.stop()


def tone(path: Path) -> None:
    t = np.arange(int(RATE_HZ * SECONDS)) / RATE_HZ
    samples = (0.3 * 32767 * np.sin(2 * math.pi * (200 + 150 * t) * t)).astype("<i2")
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE_HZ)
        wav.writeframes(samples.tobytes())


def opened_so_far(cluster: LocalCluster) -> dict[str, float]:
    """How many sessions each live replica has opened. Read before the client starts: a client
    that opens its session before this is read would never be seen to open it."""
    live = [r["route"] for r in cluster.state["replicas"] if cluster.alive(r["route"])]
    return {route: cluster.metric(route, "omni_grpc_sessions_opened_total") for route in live}


async def drain_the_owner(
    cluster: LocalCluster, process: asyncio.subprocess.Process, before: dict[str, float]
) -> str:
    """Waits for the client's session to open on a live replica (counted in ``before``, read
    before the client started), and drains that replica."""

    def opened() -> list[str]:
        return [
            route
            for route, count in before.items()
            if cluster.metric(route, "omni_grpc_sessions_opened_total") > count
        ]

    await wait_for(lambda: len(opened()) == 1 or process.returncode is not None, 60, "the open")
    (owner,) = opened()
    await asyncio.sleep(1.0)  # a second of the audio is said to the owner
    cluster.kill(owner, signal.SIGTERM)
    return owner


def assert_contiguous(seqs: list[int]) -> None:
    assert seqs == list(range(1, len(seqs) + 1)), seqs


async def test_the_node_client_follows_its_session_to_the_adopter(
    cluster: LocalCluster,
    stream_wav: Path,
    tmp_path: Path,
) -> None:
    tone(tmp_path / "in.wav")
    before = opened_so_far(cluster)
    process = await asyncio.create_subprocess_exec(
        *("node", str(stream_wav), "--target", cluster.target, "--wav", str(tmp_path / "in.wav")),
        *("--out", str(tmp_path / "reply.wav"), "--timeout", "60"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    owner = await drain_the_owner(cluster, process, before)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()
    summary = json.loads(stderr.decode().splitlines()[-1])
    events = [json.loads(line) for line in stdout.decode().splitlines()]
    resumed = [e for e in events if e["type"] == "session_resumed"]
    assert summary["answered"] and summary["reconnects"] >= 1 and resumed
    assert summary["route"] not in ("", owner)  # the adopter's key, sent from then on
    assert_contiguous([e["seq"] for e in events if e["seq"]])


async def test_the_go_client_follows_its_session_to_the_adopter(
    cluster: LocalCluster,
    go_build: GoBuild,
    tmp_path: Path,
) -> None:
    tone(tmp_path / "in.wav")
    before = opened_so_far(cluster)
    process = await asyncio.create_subprocess_exec(
        *(str(go_build.binary), "--target", cluster.target, "--wav", str(tmp_path / "in.wav")),
        *("--out", str(tmp_path / "reply.wav"), "--realtime", "--timeout", "60s"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    owner = await drain_the_owner(cluster, process, before)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()
    events = [json_format.Parse(line, pb.ConverseResponse()) for line in stdout.splitlines()]
    resumed = [e.session_resumed for e in events if e.HasField("session_resumed")]
    route = re.search(r"^route: (\S+)$", stderr.decode(), re.MULTILINE)
    assert resumed and route, stderr.decode()
    # The adopter named itself, and the client keeps its key to send from then on.
    assert resumed[-1].route == route.group(1) and route.group(1) != owner
    assert any(e.HasField("response_done") for e in events)
    assert_contiguous([e.seq for e in events if e.seq])
