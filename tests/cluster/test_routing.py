"""Three replicas behind HAProxy: new sessions spread over all of them, and a session's later
calls (a resume after a cut, GetSession) reach the replica that owns it, by the routing key it
handed out, with no adoption anywhere."""

from __future__ import annotations

import pytest

from omni_grpc.client import DuplexClient
from tests.client.proxy import ChaosProxy
from tests.cluster.local import LocalCluster, wait_for
from tests.cluster.speaker import OPTIONS, Speaker, words

ROUTES = ("r1", "r2", "r3")


@pytest.fixture
def cluster(three_replicas: LocalCluster) -> LocalCluster:
    return three_replicas


def adopted(cluster: LocalCluster) -> float:
    return sum(cluster.metric(route, "omni_sessions_adopted_total") for route in ROUTES)


async def test_new_sessions_spread_over_every_replica(cluster: LocalCluster) -> None:
    speakers = [await Speaker.open(cluster.target) for _ in range(6)]
    try:
        routes = [speaker.route for speaker in speakers]
        assert set(routes) == set(ROUTES), routes  # least connections: two each
        for route in ROUTES:
            status, health = cluster.health(route)
            assert status == 200 and health["durable"] and health["route"] == route
    finally:
        for speaker in speakers:
            await speaker.close()


async def test_a_resume_after_a_cut_lands_on_the_owner(cluster: LocalCluster) -> None:
    host, port = cluster.target.split(":")
    before = adopted(cluster)
    async with ChaosProxy(host, int(port), seed=3) as cut:
        speaker = await Speaker.open(cut.target)
        owner = speaker.route
        resumes_before = cluster.metric(owner, "omni_grpc_resumes_total")
        await speaker.say("before the cut")
        await speaker.answered(1)
        assert cut.cut_all() >= 1
        await wait_for(lambda: speaker.client.stats.reconnects >= 1, 60, "the resume")
        await speaker.say("after the cut")
        answer = await speaker.answered(2)
        assert "before the cut" in words(answer)  # the same conversation, on the same replica
        assert speaker.route == owner
        assert cluster.metric(owner, "omni_grpc_resumes_total") > resumes_before
        reply = await speaker.client.get_session()  # routed to the owner too
        assert reply.session.id == speaker.client.session_id
        await speaker.close()
    assert adopted(cluster) == before


async def test_a_resume_without_the_key_is_sent_to_the_owner(cluster: LocalCluster) -> None:
    """A client that lost the routing key (a fresh process with only the handle) is told where
    the session lives by whichever replica it reached, and its retry goes there."""
    before = adopted(cluster)
    speakers = [await Speaker.open(cluster.target) for _ in range(3)]
    for speaker in speakers:
        handle = await speaker.client.detach()
        taken = await DuplexClient.resume(
            cluster.target, handle.session_id, handle.resume_token, handle.last_seq, options=OPTIONS
        )
        assert taken._conn.route == speaker.route
        await taken.close()
    assert adopted(cluster) == before
