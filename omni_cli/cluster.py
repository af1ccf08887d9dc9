"""A local cluster on 127.0.0.1: Redis, N replicas, HAProxy in front, and the bridge.

``scripts/cluster --replicas N --grpc-port P --http-port Q --state-file FILE [-- SERVE ARGS]``
starts ``redis-server``, N ``omni-grpc serve`` replicas (each with its routing key ``r1`` … and
durable sessions in that Redis), the websocket bridge, and HAProxy with the configuration of
``deploy/haproxy/haproxy.cfg.in`` filled in: gRPC on P, the bridge on Q. It prints one line
when everything answers, writes FILE (JSON: the proxy's addresses, Redis's and each replica's
pid, address, route and agent port), and stops everything on SIGTERM or Ctrl-C. Arguments after
``--`` go to every replica (an engine, its options, limits, ``--capacity``). Each replica answers
HAProxy's agent check with its free room (``--agent-port``), so new sessions go where there is
room.

The children are plain processes, so a test (or a person) can kill -9 a replica, SIGTERM it,
or stop Redis, and watch the rest carry on. With ``--restart on-failure`` (a replica that died
of a signal or an error) or ``--restart always`` (any exit, a drain's too), the runner is the
replicas' supervisor, as systemd's ``Restart=`` or a Kubernetes pod's restart policy is: a dead
replica is started again after :data:`RESTART_DELAY_S` (doubled, up to
:data:`MAX_RESTART_DELAY_S`, while it keeps dying young) with its own route and ports, and the
state file is written again with its new pid and its count of restarts. A restarted replica
takes back the sessions still its own (their record names its route) as their clients resume;
those its peers adopted meanwhile stay theirs. docs/deploy.md explains the pieces.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from omni_grpc.wire.keys import LABEL_SECRET_ENV

READY_TIMEOUT_S = 120.0  # a loaded 2-core machine imports the server slowly
AGENT_INTER = "250ms"  # how often the proxy asks each replica for its room
POLL_S = 0.1
STOP_TIMEOUT_S = 15.0
RESTART_POLICIES = ("no", "on-failure", "always")
RESTART_DELAY_S = 0.5  # after a replica's death, before it starts again (systemd: RestartSec)
MAX_RESTART_DELAY_S = 30.0  # the longest wait while it keeps dying young (a crash loop)
YOUNG_S = 10.0  # a replica that dies younger than this waits twice as long the next time
# Where Debian installs programs for the administrator (haproxy is in /usr/sbin), folders an
# ordinary user's PATH leaves out.
SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def program(name: str) -> str:
    """Where ``name`` is: on PATH, or else in one of the sbin folders, whatever the caller's
    PATH; the bare name when it is nowhere, so that starting it fails naming it."""
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(SBIN_DIRS)) or name


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the child binds it right after)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Replica:
    route: str
    grpc_port: int
    metrics_port: int
    process: subprocess.Popen[bytes]
    agent_port: int = 0
    restarts: int = 0
    started_at: float = field(default_factory=time.monotonic)
    died_at: float | None = None  # when the supervisor saw it dead (None: running)
    delay_s: float = RESTART_DELAY_S  # before its next start, once dead


@dataclass
class Cluster:
    """The processes of one local cluster and where they listen."""

    grpc_port: int
    http_port: int
    redis_port: int
    stats_port: int = field(default_factory=lambda: free_port())
    redis: subprocess.Popen[bytes] | None = None
    replicas: list[Replica] = field(default_factory=list)
    bridges: list[tuple[int, subprocess.Popen[bytes]]] = field(default_factory=list)
    proxy: subprocess.Popen[bytes] | None = None
    serve_args: list[str] = field(default_factory=list)  # every replica's, at each start

    def state(self) -> dict[str, object]:
        """What the state file holds."""
        assert self.redis is not None and self.proxy is not None
        return {
            "proxy": {
                "grpc": f"127.0.0.1:{self.grpc_port}",
                "http": f"127.0.0.1:{self.http_port}",
                "stats": f"http://127.0.0.1:{self.stats_port}/stats",
                "pid": self.proxy.pid,
            },
            "redis": {"pid": self.redis.pid, "port": self.redis_port},
            "replicas": [
                {
                    "pid": replica.process.pid,
                    "grpc": f"127.0.0.1:{replica.grpc_port}",
                    "metrics": f"127.0.0.1:{replica.metrics_port}",
                    "agent": f"127.0.0.1:{replica.agent_port}",
                    "route": replica.route,
                    "restarts": replica.restarts,
                }
                for replica in self.replicas
            ],
            "bridges": [{"pid": process.pid, "port": port} for port, process in self.bridges],
        }

    def processes(self) -> list[subprocess.Popen[bytes]]:
        """Every child, the proxy first and Redis last (the order they stop in)."""
        children = [self.proxy] if self.proxy else []
        children += [process for _, process in self.bridges]
        children += [replica.process for replica in self.replicas]
        return children + ([self.redis] if self.redis else [])


def redis_command(port: int, workdir: Path) -> list[str]:
    """Redis on 127.0.0.1:``port``, in memory only: sessions outlive replicas, not Redis."""
    listen = ["--bind", "127.0.0.1", "--port", str(port)]
    memory_only = ["--save", "", "--appendonly", "no", "--dir", str(workdir)]
    return [program("redis-server"), *listen, *memory_only]


def haproxy_config(
    template: str,
    *,
    ports: tuple[int, int, int],
    replicas: Sequence[tuple[str, int, int]],
    bridges: Sequence[int],
    agents: Sequence[int] = (),
) -> str:
    """The template filled in: ``ports`` (gRPC, HTTP, stats), each replica as (route, gRPC
    port, metrics port), each bridge process's port, and each replica's agent port when they
    answer HAProxy's agent check (``agents``, in the order of ``replicas``); all on 127.0.0.1."""
    use = "\n".join(
        f"    use-server {route} if {{ req.hdr(x-omni-route) -m str {route} }}"
        for route, _, _ in replicas
    )
    agent = [f" agent-check agent-port {port} agent-inter {AGENT_INTER}" for port in agents]
    servers = "\n".join(
        f"    server {route} 127.0.0.1:{grpc} port {metrics}" + (agent[i] if agent else "")
        for i, (route, grpc, metrics) in enumerate(replicas)
    )
    bridge_lines = "\n".join(f"    server b{i} 127.0.0.1:{p}" for i, p in enumerate(bridges, 1))
    grpc_port, http_port, stats_port = ports
    return (
        template.replace("@BIND@", "127.0.0.1")
        .replace("@GRPC_PORT@", str(grpc_port))
        .replace("@HTTP_PORT@", str(http_port))
        .replace("@STATS_PORT@", str(stats_port))
        .replace("@USE_SERVERS@", use)
        .replace("@SERVERS@", servers)
        .replace("@BRIDGES@", bridge_lines)
    )


def _omni(*args: str) -> list[str]:
    return [sys.executable, "-m", "omni_cli", *args]


def start_replica(cluster: Cluster, index: int) -> Replica:
    """Starts replica ``r<index>`` with durable sessions in the cluster's Redis."""
    route = f"r{index}"
    grpc_port, metrics_port, agent_port = free_port(), free_port(), free_port()
    process = _spawn_replica(cluster, route, (grpc_port, metrics_port, agent_port))
    return Replica(route, grpc_port, metrics_port, process, agent_port)


def _spawn_replica(
    cluster: Cluster, route: str, ports: tuple[int, int, int]
) -> subprocess.Popen[bytes]:
    grpc_port, metrics_port, agent_port = ports
    command = _omni(
        "serve",
        "--grpc-port",
        str(grpc_port),
        "--http-port",
        "0",
        "--metrics-port",
        str(metrics_port),
        "--agent-port",
        str(agent_port),
        "--route",
        route,
        "--redis-url",
        f"redis://127.0.0.1:{cluster.redis_port}/0",
        "--durability",
        "async",
        # HAProxy and the bridges run here and say who their clients are (x-forwarded-for):
        # the per-address bound counts each client, not the proxy.
        "--trusted-proxy",
        "127.0.0.1",
        *cluster.serve_args,  # later flags win: the caller may choose sync, or off
    )
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


def supervise(cluster: Cluster, policy: str, now: float) -> list[Replica]:
    """Starts again, with its own route and ports, every replica that ``policy`` says to
    restart and whose delay has passed; returns those restarted (the state file changes)."""
    restarted = []
    for replica in cluster.replicas:
        code = replica.process.poll()
        if code is None or policy == "no" or (policy == "on-failure" and code == 0):
            continue
        if replica.died_at is None:
            replica.died_at = now
            young = now - replica.started_at < YOUNG_S
            replica.delay_s = (
                min(replica.delay_s * 2, MAX_RESTART_DELAY_S) if young else RESTART_DELAY_S
            )
            print(f"scripts/cluster: replica {replica.route} exited ({code})", flush=True)
        if now - replica.died_at < replica.delay_s:
            continue
        ports = (replica.grpc_port, replica.metrics_port, replica.agent_port)
        replica.process = _spawn_replica(cluster, replica.route, ports)
        replica.restarts += 1
        replica.started_at, replica.died_at = now, None
        restarted.append(replica)
        print(
            f"scripts/cluster: replica {replica.route} restarted (pid {replica.process.pid})",
            flush=True,
        )
    return restarted


def _answers_http(port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def proxy_status(stats_port: int) -> dict[str, str]:
    """HAProxy's status of each server ("UP", "DOWN", ...), by backend/server name."""
    url = f"http://127.0.0.1:{stats_port}/stats;csv"
    with urllib.request.urlopen(url, timeout=2) as reply:
        lines = reply.read().decode().splitlines()
    header = lines[0].lstrip("# ").split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
    return {
        f"{row['pxname']}/{row['svname']}": row["status"]
        for row in rows
        if row["svname"] not in ("FRONTEND", "BACKEND")
    }


def proxy_sees_all_up(stats_port: int, servers: int) -> bool:
    """Whether HAProxy counts ``servers`` servers and has every one up."""
    try:
        status = proxy_status(stats_port)
    except OSError:
        return False
    return len(status) == servers and all(state == "UP" for state in status.values())


def wait_ready(cluster: Cluster, deadline: float) -> None:
    """Waits until Redis, every replica, every bridge and the proxy answer; raises
    RuntimeError when a child exits or the deadline passes."""
    checks: list[Callable[[], bool]] = [functools.partial(_accepts, cluster.redis_port)]
    checks += [
        functools.partial(_answers_http, r.metrics_port, "/health") for r in cluster.replicas
    ]
    checks += [functools.partial(_answers_http, port, "/health") for port, _ in cluster.bridges]
    checks += [functools.partial(_accepts, port) for port in (cluster.grpc_port, cluster.http_port)]
    servers = len(cluster.replicas) + len(cluster.bridges)
    checks += [functools.partial(proxy_sees_all_up, cluster.stats_port, servers)]
    for check in checks:
        while not check():
            for process in cluster.processes():
                if process.poll() is not None:
                    raise RuntimeError(f"{process.args!r} exited")
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not come up in time")
            time.sleep(POLL_S)


def start(args: argparse.Namespace, workdir: Path, cluster: Cluster) -> None:
    """Starts every process of ``cluster`` and waits for them; see the module docstring."""
    cluster.redis = subprocess.Popen(
        redis_command(cluster.redis_port, workdir), stdout=subprocess.DEVNULL
    )
    cluster.serve_args = list(args.serve_args)
    if cluster.serve_args[:1] == ["--"]:
        cluster.serve_args = cluster.serve_args[1:]
    for index in range(1, args.replicas + 1):
        cluster.replicas.append(start_replica(cluster, index))
    for _ in range(args.bridges):
        port = free_port()
        command = _omni(
            "bridge", "--grpc-target", f"127.0.0.1:{args.grpc_port}", "--port", str(port)
        )
        cluster.bridges.append((port, subprocess.Popen(command, stdout=subprocess.DEVNULL)))
    config = workdir / "haproxy.cfg"
    filled = haproxy_config(
        Path(args.haproxy_template).read_text(),
        ports=(cluster.grpc_port, cluster.http_port, cluster.stats_port),
        replicas=[(r.route, r.grpc_port, r.metrics_port) for r in cluster.replicas],
        bridges=[port for port, _ in cluster.bridges],
        agents=[r.agent_port for r in cluster.replicas],
    )
    config.write_text(filled)
    cluster.proxy = subprocess.Popen([program("haproxy"), "-db", "-f", str(config)])
    wait_ready(cluster, time.monotonic() + READY_TIMEOUT_S)


def stop(cluster: Cluster) -> None:
    """SIGTERM to every child (replicas drain), then SIGKILL to what is left."""
    for process in cluster.processes():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in cluster.processes():
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def write_state(cluster: Cluster, path: Path) -> None:
    """Writes the state file whole, at once (a reader never sees half of it)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(cluster.state(), indent=2) + "\n")
    partial.replace(path)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/cluster", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--grpc-port", type=int, default=50051)
    parser.add_argument("--http-port", type=int, default=8080)
    parser.add_argument("--redis-port", type=int, default=0, help="default: a free port")
    parser.add_argument("--bridges", type=int, default=1, help="bridge processes (default 1)")
    parser.add_argument("--state-file", required=True, metavar="FILE")
    parser.add_argument(
        "--restart",
        choices=RESTART_POLICIES,
        default="no",
        help="start a dead replica again: no (default), on-failure (killed or failed), always",
    )
    parser.add_argument(
        "--haproxy-template", default="deploy/haproxy/haproxy.cfg.in", metavar="FILE"
    )
    parser.add_argument("serve_args", nargs=argparse.REMAINDER, help="-- then serve flags")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    stopping = False
    # One label secret for every replica and bridge (inherited), so they label a key alike.
    os.environ.setdefault(LABEL_SECRET_ENV, secrets.token_hex(32))

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with tempfile.TemporaryDirectory(prefix="omni-cluster-") as workdir:
        cluster = Cluster(args.grpc_port, args.http_port, args.redis_port or free_port())
        try:
            start(args, Path(workdir), cluster)
            write_state(cluster, Path(args.state_file))
            print(
                f"omni-grpc cluster ready: gRPC on 127.0.0.1:{args.grpc_port}, "
                f"bridge on http://127.0.0.1:{args.http_port}/, {args.replicas} replicas, "
                f"state in {args.state_file}",
                flush=True,
            )
            while not stopping:
                time.sleep(POLL_S)
                if not stopping and supervise(cluster, args.restart, time.monotonic()):
                    write_state(cluster, Path(args.state_file))
        except RuntimeError as error:
            print(f"scripts/cluster: {error}", file=sys.stderr)
            return 1
        finally:
            stop(cluster)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(args.state_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
