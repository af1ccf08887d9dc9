"""The chaos test through HAProxy against three replicas with durable sessions.

The same talkers, cuts and checks as ``test_chaos.py``, but the chaos proxy sits in front of
HAProxy (deploy/haproxy, as scripts/cluster fills it in), which spreads the sessions over three
replicas sharing one Redis. Every resume after a cut must find its session's replica through
the routing key the client sends back, and each takeover goes to HAProxy with the key of the
handle it was given (not through the chaos proxy, as in the original). The replicas run in this
process, so the test's spies see every journal and every engine command, as in the original.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from omni_cli.cluster import free_port, haproxy_config, program, proxy_sees_all_up, redis_command
from omni_cli.cluster_child import ROOT
from omni_grpc.core import Limits
from omni_grpc.server.app import RunningServer, start_server
from omni_grpc.server.metrics_endpoint import start_metrics_endpoint
from tests.chaos.test_chaos import SESSIONS, TAKEOVERS, Talker, Truth, check_sessions
from tests.client.proxy import ChaosProxy
from tests.cluster.local import wait_for
from tests.serving import settings

# Redis and HAProxy are child processes.
pytestmark = pytest.mark.subprocess

REPLICAS = 3


@contextlib.asynccontextmanager
async def replicas_behind_haproxy(tmp: Path) -> AsyncIterator[tuple[list[RunningServer], str]]:
    """Redis, three in-process replicas with their /health, and HAProxy; yields the replicas
    and HAProxy's gRPC address."""
    redis_port = free_port()
    redis = await asyncio.create_subprocess_exec(
        *redis_command(redis_port, tmp), stdout=asyncio.subprocess.DEVNULL
    )
    running: list[RunningServer] = []
    endpoints = []
    proxy = None
    try:
        for index in range(1, REPLICAS + 1):
            server_settings = dataclasses.replace(
                settings(limits=Limits(disconnect_grace_s=30.0)),
                route=f"r{index}",
                durability="async",
                redis_url=f"redis://127.0.0.1:{redis_port}/0",
            )
            running.append(await start_server(server_settings))
            endpoints.append(await start_metrics_endpoint("127.0.0.1", 0, running[-1].readiness))
        ports = (free_port(), free_port(), free_port())
        config = tmp / "haproxy.cfg"
        config.write_text(
            haproxy_config(
                (ROOT / "deploy/haproxy/haproxy.cfg.in").read_text(),
                ports=ports,
                replicas=[
                    (r.settings.route, r.grpc_port, port)
                    for r, (_, port) in zip(running, endpoints, strict=True)
                ],
                bridges=[],
            )
        )
        proxy = await asyncio.create_subprocess_exec(program("haproxy"), "-db", "-f", str(config))
        await wait_for(
            lambda: asyncio.to_thread(proxy_sees_all_up, ports[2], REPLICAS), 60, "HAProxy"
        )
        yield running, f"127.0.0.1:{ports[0]}"
    finally:
        if proxy is not None:
            proxy.terminate()
            await proxy.wait()
        for server in running:
            await server.stop()
        for runner, _ in endpoints:
            await runner.cleanup()
        redis.terminate()
        await redis.wait()


async def test_random_cuts_through_haproxy_lose_nothing_and_double_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    truth = Truth(monkeypatch)
    async with replicas_behind_haproxy(tmp_path) as (running, haproxy):
        host, port = haproxy.split(":")
        async with ChaosProxy(host, int(port), seed=11) as proxy:
            talkers = [Talker(i) for i in range(SESSIONS)]
            await asyncio.gather(*(t.open(proxy.target) for t in talkers))
            routes = {t.client._conn.route for t in talkers if t.client}
            assert routes == {"r1", "r2", "r3"}  # spread over every replica
            proxy.cut_randomly(mean_bytes=60_000)
            proxy.start_random_cuts(0.05, 0.25)
            try:
                await asyncio.gather(
                    *(
                        t.talk(proxy.target, haproxy if t.index < TAKEOVERS else None)
                        for t in talkers
                    )
                )
            finally:
                await proxy.stop_random_cuts()
                proxy.cut_randomly(None)
            assert proxy.stats.cuts >= 10, "the proxy hardly cut anything"
            assert sum(t.client.stats.reconnects for t in talkers if t.client) >= 10
        check_sessions(truth, talkers)
        for server in running:
            assert len(server.registry) == 0  # every session closed once, on its own replica
            assert server.store is not None and server.store.up
