"""Three replicas at capacity behind HAProxy: each tells the proxy its free room through the
agent check, so new sessions go where there is room, while a call that names its replica
still goes there; a session that waits on a full replica and is cut resumes its wait there,
keeping its place; and one client connection carries more waiting sessions through the proxy
than HAProxy's default bound on a connection's streams."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from omni_cli.cluster import haproxy_config
from omni_grpc.client import ClientOptions, DuplexClient
from omni_grpc.client.channel import ChannelSettings, Connection, Stream
from omni_grpc.wire import pb
from omni_grpc.wire.stream_end import StreamBroken
from tests.client.proxy import ChaosProxy
from tests.cluster.local import LocalCluster, wait_for
from tests.cluster.speaker import PATIENT

ROUTES = ("r1", "r2", "r3")
CAPACITY = 2
# Loopback at fast pace: these tests are about places, not answers.
SERVE = (
    *("--engine", "loopback", "--engine-option", "pace=fast"),
    *("--capacity", str(CAPACITY), "--shutdown-grace-s", "5"),
)
WAIT_S = 60.0  # generous: the suite runs on a loaded 2-core machine
# HAProxy's own bound on the streams of one client connection, when its configuration sets
# none (tune.h2.max-concurrent-streams): past it, a stream waits in the client, unanswered.
PROXY_DEFAULT_STREAMS = 100


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(Path(tmp_path_factory.mktemp("admission")), serve_args=SERVE)
    try:
        yield local.wait_ready()
    finally:
        local.stop()


def weights(cluster: LocalCluster) -> dict[str, int]:
    """HAProxy's current weight of each replica (what the agents told it)."""
    with urllib.request.urlopen(cluster.state["proxy"]["stats"] + ";csv", timeout=5) as reply:
        lines = reply.read().decode().splitlines()
    header = lines[0].lstrip("# ").split(",")
    rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
    return {
        row["svname"]: int(row["weight"])
        for row in rows
        if row["pxname"] == "replicas" and row["svname"] in ROUTES
    }


def empty(cluster: LocalCluster) -> bool:
    """Whether no replica holds a session (a detached one included) or a wait."""
    healths = [cluster.health(route)[1] for route in ROUTES]
    return all(health["sessions"] == 0 and health["queued"] == 0 for health in healths)


def direct(cluster: LocalCluster, route: str) -> str:
    return str(cluster.replica(route)["grpc"])


async def connect(target: str, **options: object) -> DuplexClient:
    chosen = ClientOptions(reconnect=PATIENT, open_retry=PATIENT, **options)  # type: ignore[arg-type]
    return await DuplexClient.connect(target, options=chosen)


async def test_new_sessions_go_where_there_is_room_and_resumes_to_their_owner(
    cluster: LocalCluster,
) -> None:
    # r1 full, r2 half full, r3 empty, each opened on its replica directly.
    held = [await connect(direct(cluster, "r1")) for _ in range(CAPACITY)]
    held.append(await connect(direct(cluster, "r2")))
    try:
        await wait_for(
            lambda: weights(cluster) == {"r1": 1, "r2": 50, "r3": 100},
            WAIT_S,
            "the agents' weights at the proxy",
        )
        # A new session through the proxy: leastconn over streams per weight picks r3.
        new = await connect(cluster.target)
        assert new._conn.route == "r3"
        # A call that names the full replica still reaches it (use-server ignores weights).
        handle = await held[0].detach()
        taken = await DuplexClient.resume(
            cluster.target,
            handle.session_id,
            handle.resume_token,
            handle.last_seq,
            route="r1",
            options=ClientOptions(reconnect=PATIENT, open_retry=PATIENT),
        )
        assert taken._conn.route == "r1"
        reply = await taken.get_session()
        assert reply.session.id == handle.session_id
        held[0] = taken
        held.append(new)
    finally:
        for client in held:
            await client.close()


async def test_a_cut_wait_on_a_full_replica_resumes_there_and_keeps_its_place(
    cluster: LocalCluster,
) -> None:
    held = [await connect(direct(cluster, route)) for route in ROUTES for _ in range(CAPACITY)]
    host, port = cluster.target.split(":")
    try:
        await wait_for(lambda: set(weights(cluster).values()) == {1}, WAIT_S, "every replica full")
        async with ChaosProxy(host, int(port), seed=5) as cut:
            notices: list[pb.SessionQueued] = []
            opening = asyncio.create_task(connect(cut.target, on_queued=notices.append))
            await wait_for(lambda: len(notices) >= 1, WAIT_S, "the first notice")
            owner = notices[0].route
            assert owner in ROUTES and notices[0].position == 1
            assert cluster.metric(owner, "omni_grpc_queue_length") == 1
            assert cut.cut_all() >= 1
            # The resumed stream is told its place at once (the away time is too short to see).
            await wait_for(lambda: len(notices) >= 2, WAIT_S, "a notice on the resumed stream")
            assert notices[-1].session_id == notices[0].session_id
            assert notices[-1].route == owner and notices[-1].resume_token == ""
            await wait_for(
                lambda: (
                    cluster.metric(owner, "omni_grpc_queue_length") == 1
                    and cluster.metric(owner, "omni_grpc_queue_away") == 0
                ),
                WAIT_S,
                "the wait resumed on its replica",
            )
            # A place frees on the owner: the wait becomes its session, there.
            victim = next(c for c in held if c._conn.settings.target == direct(cluster, owner))
            await victim.close()
            held.remove(victim)
            admitted = await asyncio.wait_for(opening, WAIT_S)
            try:
                assert admitted.session_id == notices[0].session_id
                assert admitted._conn.route == owner
                assert cluster.metric(owner, "omni_grpc_queue_admitted_total") >= 1
            finally:
                # Closed through its proxy while it is there: closed after, the session
                # would stay for the disconnect grace, holding a place the next test needs.
                await admitted.close()
    finally:
        for client in held:
            await client.close()


async def first_answer(stream: Stream) -> str:
    """What a new session is told first: admitted, queued, or refused (an error's code)."""
    await stream.write(pb.ConverseRequest(open_session=pb.OpenSession(config=pb.SessionConfig())))
    first = await stream.read()
    if first is None:
        return "ended"
    kind = first.WhichOneof("event")
    return first.error.code if kind == "error" else str(kind)


async def close_and_drain(stream: Stream) -> None:
    """Closes the session (a waiting one is closed once admitted) and reads to the end, so
    no session is left for the disconnect grace. The end may come as CANCELLED: HAProxy 2.6
    cancels a stream the server ends before the client half-closed it (docs/deploy.md)."""
    with contextlib.suppress(StreamBroken):
        await stream.write(pb.ConverseRequest(client_seq=1, close_session=pb.CloseSession()))
        while await stream.read() is not None:
            pass


@pytest.mark.timeout(300)  # three generous waits, not one
async def test_one_connection_through_the_proxy_carries_more_sessions_than_its_default(
    cluster: LocalCluster,
) -> None:
    # A bridge process carries every session of its websockets, waiting ones included, on
    # one gRPC connection to the proxy (so do a process's clients of one target: gRPC puts
    # their channels on one connection). Each must be answered, admitted or told its place:
    # the replicas' queues, not the proxy's bound on a connection's streams, decide who waits.
    # Every replica empty, and the proxy told so: each gets its share of the new sessions.
    await wait_for(
        lambda: empty(cluster) and set(weights(cluster).values()) == {100},
        WAIT_S,
        "an empty cluster, as the proxy sees it",
    )
    sessions = PROXY_DEFAULT_STREAMS + CAPACITY * len(ROUTES)
    connection = Connection(ChannelSettings(target=cluster.target))
    streams = [connection.converse() for _ in range(sessions)]

    async def answered(stream: Stream) -> str:
        try:
            return await asyncio.wait_for(first_answer(stream), WAIT_S)
        except TimeoutError:
            return "no answer"

    try:
        told = Counter(await asyncio.gather(*(answered(stream) for stream in streams)))
        queued = sessions - CAPACITY * len(ROUTES)
        assert told == {"session_created": CAPACITY * len(ROUTES), "session_queued": queued}
        assert sum(cluster.metric(r, "omni_grpc_queue_length") for r in ROUTES) == queued
    finally:
        await asyncio.wait_for(
            asyncio.gather(*(close_and_drain(stream) for stream in streams)), 2 * WAIT_S
        )
        await connection.close()
    await wait_for(lambda: empty(cluster), WAIT_S, "every session closed and every queue empty")


def test_the_filled_template_asks_each_replica_for_its_room() -> None:
    template = (Path(__file__).resolve().parents[2] / "deploy/haproxy/haproxy.cfg.in").read_text()
    config = haproxy_config(
        template,
        ports=(50051, 8080, 8404),
        replicas=[("r1", 7001, 9001), ("r2", 7002, 9002)],
        bridges=[8081],
        agents=[6001, 6002],
    )
    assert "weight 100" in config
    assert "server r2 127.0.0.1:7002 port 9002 agent-check agent-port 6002" in config
