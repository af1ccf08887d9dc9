"""A local cluster for tests: ``scripts/cluster``'s own runner, as a real child process.

:class:`LocalCluster` starts ``python -m omni_cli.cluster`` (Redis, the replicas, HAProxy from
deploy/haproxy, the bridge) as :mod:`omni_cli.cluster_child` does, waits for its state file, and
stops it. Tests kill, signal and
scrape the processes the state file names. Everything waits on conditions with generous
deadlines, never on fixed sleeps: the suite runs on a loaded 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from omni_cli.cluster import proxy_sees_all_up
from omni_cli.cluster_child import ClusterChild

START_TIMEOUT_S = 120.0
# Loopback at real-time pace (a response lasts as long as its audio, so a kill lands in the
# middle of one), answering with the conversation so far (recall) to show a history survived.
LOOPBACK = ("--engine", "loopback", "--engine-option", "recall=1", "--shutdown-grace-s", "20")


class LocalCluster(ClusterChild):
    """Redis, replicas, HAProxy and the bridge as scripts/cluster starts them."""

    def __init__(
        self,
        tmp: Path,
        replicas: int = 3,
        serve_args: tuple[str, ...] = LOOPBACK,
        cluster_args: tuple[str, ...] = (),
    ):
        super().__init__(
            replicas,
            serve_args,
            tmp / "cluster.json",
            tmp / "cluster.log",
            cluster_args=cluster_args,
        )

    def wait_ready(self) -> LocalCluster:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.read_state():
            assert self.process.poll() is None, self.log()
            assert time.monotonic() < deadline, "the cluster did not start in time"
            time.sleep(0.1)
        return self

    def restarted(self, route: str, restarts: int) -> bool:
        """Whether the supervisor (``--restart``) has started ``route`` again ``restarts``
        times and the proxy sees every replica up (the state file is read again)."""
        self.read_state()
        if self.replica(route)["restarts"] < restarts:
            return False
        stats_port = urllib.parse.urlsplit(self.state["proxy"]["stats"]).port
        servers = len(self.state["replicas"]) + len(self.state["bridges"])
        return stats_port is not None and proxy_sees_all_up(stats_port, servers)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    # -- what the state file names ----------------------------------------------------------

    @property
    def target(self) -> str:
        return str(self.state["proxy"]["grpc"])

    def replica(self, route: str) -> dict[str, Any]:
        return next(r for r in self.state["replicas"] if r["route"] == route)

    def kill(self, route: str, signum: int = signal.SIGKILL) -> None:
        os.kill(self.replica(route)["pid"], signum)

    def alive(self, route: str) -> bool:
        try:
            os.kill(self.replica(route)["pid"], 0)
        except ProcessLookupError:
            return False
        # A child that exited stays a zombie until the runner reaps it: read its state.
        stat = Path(f"/proc/{self.replica(route)['pid']}/stat").read_text()
        return stat.split()[2] != "Z"

    def health(self, route: str) -> tuple[int, dict[str, Any]]:
        url = f"http://{self.replica(route)['metrics']}/health"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def metric(self, route: str, name: str, labels: str = "") -> float:
        """The sum of every sample of ``name`` (all labels, or only those ``labels`` says,
        as written in the exposition: ``why="own_route"``) a replica exposes now."""
        url = f"http://{self.replica(route)['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        which = rf"\{{{re.escape(labels)}\}}" if labels else r"(?:\{[^}]*\})?"
        pattern = re.compile(rf"^{re.escape(name)}{which} (\S+)$", re.MULTILINE)
        return sum(float(value) for value in pattern.findall(text))


async def wait_for(
    condition: Callable[[], bool | Awaitable[bool]], timeout_s: float, what: str
) -> None:
    """Polls ``condition`` until it holds; fails naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
