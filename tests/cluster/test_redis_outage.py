"""Redis killed and started again under traffic: nothing crashes, the sessions go on in memory,
each replica says it is degraded (health and metrics), and once Redis is back every session is
written whole again: a replica killed after that still hands its sessions to a peer."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from omni_cli.cluster import redis_command
from tests.cluster.local import LocalCluster, wait_for
from tests.cluster.speaker import Speaker, words

ROUTES = ("r1", "r2")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path, replicas=2)
    try:
        yield local.wait_ready()
    finally:
        local.stop()


def durable_everywhere(cluster: LocalCluster, up: bool) -> bool:
    for route in ROUTES:
        status, health = cluster.health(route)
        if status != 200 or health["durable"] is not up:
            return False
        if cluster.metric(route, "omni_durability_up") != float(up):
            return False
    return True


async def test_redis_away_and_back(cluster: LocalCluster, tmp_path: Path) -> None:
    speakers = [await Speaker.open(cluster.target) for _ in range(4)]
    for i, speaker in enumerate(speakers):
        await speaker.say(f"alpha{i}")
        await speaker.answered(1)
    redis_port = cluster.state["redis"]["port"]
    os.kill(cluster.state["redis"]["pid"], signal.SIGKILL)
    await wait_for(lambda: durable_everywhere(cluster, up=False), 60, "the degradation to show")
    for route in ROUTES:
        assert cluster.metric(route, "omni_durability_write_errors_total") >= 1
    # The sessions go on in memory meanwhile.
    for i, speaker in enumerate(speakers):
        await speaker.say(f"beta{i}")
        await speaker.answered(2)
    restarted = await asyncio.create_subprocess_exec(
        *redis_command(redis_port, tmp_path), stdout=asyncio.subprocess.DEVNULL
    )
    store = aioredis.Redis(port=redis_port)
    try:
        await wait_for(lambda: durable_everywhere(cluster, up=True), 60, "durability to return")
        # Written whole again: the owner of the first session dies, a peer adopts it with
        # everything said while Redis was away.
        first = speakers[0]
        victim = first.route
        await wait_for(lambda: _stored(store, first), 30, "the session to be rewritten")
        cluster.kill(victim, signal.SIGKILL)
        await first.say("gamma0")
        third = await first.answered(3)
        assert "alpha0" in words(third) and "beta0" in words(third), words(third)
        assert first.route != victim
        seqs = first.seqs()
        assert seqs == list(range(1, len(seqs) + 1))
        for speaker in speakers:
            assert speaker.error is None
    finally:
        await store.aclose()
        restarted.terminate()
        await restarted.wait()


async def _stored(store: aioredis.Redis, speaker: Speaker) -> bool:
    """Whether Redis holds the session up to the last event its client received."""
    head = await store.hget(f"omni:session:{speaker.client.session_id}", "head")
    return head is not None and int(head) >= max(speaker.seqs())
