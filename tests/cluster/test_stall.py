"""A replica that stalls past its lease (SIGSTOP) in the middle of an answer, while a peer adopts
its session, and then wakes (SIGCONT): the fencing token keeps it from writing the session again,
its stream ends with ``going_away`` (``session_moved``), and the client carries on at the adopter
with nothing lost or doubled.

The adoption comes from a resume on another connection (what a client does when its stream goes
silent, or a second device of the same user): it presents the session's token and goes without
saying anything, so the token stays the client's. The stalled owner's own stream stays open
through HAProxy the whole time, as it would for a client that saw nothing wrong.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import grpc
import pytest
import redis.asyncio as aioredis

from omni_grpc.client import ResumeHandle
from omni_grpc.gen.omni.duplex.v1.duplex_pb2_grpc import DuplexServiceStub
from omni_grpc.server.durable import journal_key, lease_key, session_key
from omni_grpc.wire import pb
from omni_grpc.wire.keys import ROUTE_HEADER, resume_token_metadata
from tests.cluster.local import LOOPBACK, LocalCluster, wait_for
from tests.cluster.speaker import Speaker, words

LONG = "is a long sentence that keeps the answer playing for a good while"
ATTEMPT_S = 3.0  # one resume attempt; one that reached the stopped owner is given up


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # sync: an event reaches a client only once Redis holds it, so the stale copy's events
    # never go out once its writes are refused.
    tmp_path = Path(tmp_path_factory.mktemp("cluster"))
    local = LocalCluster(tmp_path, replicas=2, serve_args=(*LOOPBACK, "--durability", "sync"))
    try:
        yield local.wait_ready()
    finally:
        local.stop()


async def _resume_elsewhere(target: str, handle: ResumeHandle) -> str:
    """Resumes the session on a new connection through the proxy until a replica takes it,
    and leaves without a word; returns the route of the replica that took it."""
    metadata = ((ROUTE_HEADER, handle.route), *resume_token_metadata(handle.resume_token))
    request = pb.ConverseRequest(
        resume_session=pb.ResumeSession(
            session_id=handle.session_id,
            resume_token=handle.resume_token,
            last_received_seq=handle.last_seq,
        )
    )

    routes: list[str] = []

    async def attempt() -> bool:
        async with grpc.aio.insecure_channel(target) as channel:
            call = DuplexServiceStub(channel).Converse(None, metadata=metadata, timeout=ATTEMPT_S)
            try:
                await call.write(request)
                first = await call.read()
            except grpc.aio.AioRpcError:
                return False  # refused (told to retry), or it reached the stopped owner
            finally:
                call.cancel()
            if not isinstance(first, pb.ConverseResponse) or not first.HasField("session_resumed"):
                return False
            routes.append(first.session_resumed.route)
            return True

    await wait_for(attempt, 60, "a peer to take the session")
    return routes[-1]


async def test_a_stalled_owner_wakes_fenced_and_its_client_moves_to_the_adopter(
    cluster: LocalCluster,
) -> None:
    store = aioredis.from_url(f"redis://127.0.0.1:{cluster.state['redis']['port']}/0")
    speaker = await Speaker.open(cluster.target)
    session_id = speaker.client.session_id
    await speaker.say("alpha")
    await speaker.answered(1)
    await speaker.say(f"beta {LONG}")
    await speaker.until(
        lambda s: len(s.of_kind("response_created")) >= 2 and len(s.of_kind("output_audio_delta")),
        "the second answer",
    )
    owner = speaker.route
    cluster.kill(owner, signal.SIGSTOP)
    try:
        await wait_for(
            lambda: _absent(store, lease_key(owner)), 30, "the stalled owner's lease to lapse"
        )
        adopter = await _resume_elsewhere(cluster.target, speaker.client.resume_handle())
        assert adopter and adopter != owner
        record = await store.hgetall(session_key(session_id))
        assert record[b"route"] == adopter.encode() and record[b"fence"] == b"2"
    finally:
        cluster.kill(owner, signal.SIGCONT)

    # The owner wakes with the session in memory and its stream still open: the refused write
    # ends the stream with the typed reason, and the client resumes at the adopter.
    await speaker.until(
        lambda s: any(e.going_away.reason == "session_moved" for e in s.of_kind("going_away")),
        "the stalled owner's stream to end with session_moved",
    )
    await speaker.answered(2)
    await speaker.say("gamma")
    third = await speaker.answered(3)
    assert speaker.route == adopter
    assert "alpha" in words(third) and "beta" in words(third), words(third)
    second = speaker.responses()[1]  # cut by the adoption, ended with its typed reason
    assert second.status == pb.RESPONSE_STATUS_FAILED and second.status_reason == "session_moved"
    seqs = speaker.seqs()
    assert seqs == list(range(1, len(seqs) + 1)) and speaker.client.stats.duplicate_events == 0

    # The owner tried to write the session after waking and was refused; Redis holds the
    # adopter's record and journal, byte for byte what the client got under each seq.
    assert cluster.metric(owner, "omni_sessions_moved_total") == 1
    record = await store.hgetall(session_key(session_id))
    assert record[b"route"] == adopter.encode() and record[b"fence"] == b"2"
    held = {e.seq: _event(e) for e in speaker.events if e.seq}
    entries = await store.zrange(journal_key(session_id), 0, -1, withscores=True)
    journal = cast(list[tuple[bytes, float]], entries)  # (payload, seq) pairs
    assert all(held[int(seq)] == _event(pb.ConverseResponse.FromString(p)) for p, seq in journal)
    refused = cluster.metric(owner, "omni_durability_fenced_writes_total")
    assert refused >= 1
    print(
        f"\nstall of {owner} past its lease: adopted by {adopter}, {len(seqs)} events "
        f"contiguous, {refused:.0f} stale writes refused"
    )
    await speaker.close()
    await store.aclose()


async def _absent(store: aioredis.Redis, key: str) -> bool:
    return not await store.exists(key)


def _event(event: pb.ConverseResponse) -> pb.ConverseResponse:
    """The event without its acknowledgement cursor (stamped when it is sent)."""
    copy = pb.ConverseResponse()
    copy.CopyFrom(event)
    copy.ClearField("applied_client_seq")
    return copy
