"""The session store against a real Redis (omni_grpc/server/durable.py), in process.

What the cluster tests show end to end, here part by part and fast: what a round writes and
trims, that ``sync`` waits for the write and stops waiting for a Redis that is away, that of two
replicas claiming one session exactly one wins, and what a hand-over leaves for a peer; and that
an owner which stalled while a peer adopted its session is fenced off the record.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from omni_cli.cluster import free_port, redis_command
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.durable import (
    DurableStore,
    ItemLog,
    StoreUnavailable,
    input_key,
    journal_key,
    lease_key,
    record_keys,
)
from omni_grpc.server.replay_log import ReplayLog
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_metadata
from omni_grpc.wire.stream_end import StreamBroken
from tests.cluster.local import wait_for
from tests.conftest import starts_processes
from tests.core.helpers import ack, append, created, delta, open_session, resume
from tests.server.streams import open_stream, read
from tests.serving import serving, settings

GRACE_S = 30.0


@pytest.fixture
@starts_processes
async def redis_url(tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    redis = await asyncio.create_subprocess_exec(
        *redis_command(port, tmp_path), stdout=asyncio.subprocess.DEVNULL
    )
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        redis.terminate()
        await redis.wait()


async def _store(url: str, route: str, mode: str = "async") -> DurableStore:
    store = DurableStore(url, route, mode, record_ttl_s=60.0, grace_s=GRACE_S)
    await wait_for(lambda: _up(store), 20, "Redis")
    await store.start()
    return store


async def _up(store: DurableStore) -> bool:
    try:
        return bool(await store.redis.ping())
    except OSError:
        return False
    except Exception:  # redis's ConnectionError while the server starts
        return False


async def test_a_round_writes_the_session_and_trims_what_was_acknowledged(redis_url: str) -> None:
    store = await _store(redis_url, "r1")
    try:
        session = open_session().session
        items = ItemLog()
        item = pb.ConversationItem(id="item_1", role=pb.ITEM_ROLE_USER)
        done = pb.ConverseResponse(item_done=pb.ItemDone(item=item))
        items.observe("item_done", done)
        session.publish(created("resp_1"), 1.0)
        store.mark(session, items)
        await wait_for(lambda: _head(store, session.id, session.journal.head), 20, "the write")
        stored = await store.load(session.id)
        assert stored is not None and stored.route == "r1"
        assert [seq for seq, _ in stored.entries] == list(range(1, session.journal.head + 1))
        assert [i.id for i in stored.items] == ["item_1"]
        assert stored.state.active_response_id == "resp_1"
        assert 60_000 < await store.redis.pttl(f"omni:session:{session.id}") <= 120_000
        session.receive(1, ack(session.journal.head, client_seq=1), 2.0)
        session.detach(1, 2.0)  # a detached session's record lapses with its grace
        store.mark(session, items)
        await wait_for(
            lambda: _journal_len(store, session.id, 0), 20, "the acknowledged entries to go"
        )
        assert 0 < await store.redis.pttl(f"omni:session:{session.id}") <= GRACE_S * 1000
        store.forget(session.id)
        await wait_for(lambda: _gone(store, session.id), 20, "the record to go")
    finally:
        await store.stop()


async def test_of_two_replicas_claiming_a_session_one_wins(redis_url: str) -> None:
    owner, first, second = [await _store(redis_url, route) for route in ("r1", "r2", "r3")]
    try:
        session = open_session().session
        owner.mark(session, ItemLog())
        await wait_for(lambda: _head(owner, session.id, session.journal.head), 20, "the write")
        claims = await asyncio.gather(first.claim(session.id, "r1"), second.claim(session.id, "r1"))
        assert sorted(claims) == [0, 2]  # the winner holds the session's next epoch
        assert await owner.owner_lease("r1") == "serving"
        await owner.set_draining()
        assert await owner.owner_lease("r1") == "draining"
        kept = open_session().session  # one the peers did not take
        owner.mark(kept, ItemLog())
        await wait_for(lambda: _head(owner, kept.id, kept.journal.head), 20, "the write")
        await owner.hand_over(kept, ItemLog())
        stored = await first.load(kept.id)
        assert stored is not None and stored.route == ""  # handed over: any peer may adopt
        await owner.stop()
        assert await first.owner_lease("r1") is None  # a stopped replica's lease is gone
    finally:
        for store in (owner, first, second):
            await store.stop()


async def test_a_stalled_owner_is_fenced_off_a_session_a_peer_adopted(redis_url: str) -> None:
    """The owner's writes after the adoption are refused in Redis (the record stays the
    adopter's), the owner is told which session moved and to whom, its sync waiters are let
    go, it neither writes nor deletes the session again, and its other sessions go on."""
    owner = await _store(redis_url, "r1", mode="sync")
    peer = await _store(redis_url, "r2")
    moved: list[tuple[str, str]] = []
    owner.on_fenced = lambda session_id, route: moved.append((session_id, route))
    try:
        taken, kept = open_session().session, open_session().session
        for session in (taken, kept):
            owner.mark(session, ItemLog())
            await asyncio.wait_for(owner.settled(session), 20)
        epoch = await peer.claim(taken.id, "r1")  # as if r1's lease had lapsed
        assert epoch == 2
        peer.adopted(taken.id, epoch)
        peer.mark(taken, ItemLog())
        await wait_for(lambda: _route(peer, taken.id, "r2"), 20, "the adopter's write")
        adopters_record = await peer.redis.hgetall(f"omni:session:{taken.id}")
        taken.publish(created("resp_stale"), 3.0)  # the stale copy goes on
        kept.publish(created("resp_kept"), 3.0)
        owner.mark(taken, ItemLog())
        owner.mark(kept, ItemLog())
        await asyncio.wait_for(owner.settled(taken), 20)  # let go, not left waiting
        await wait_for(lambda: moved == [(taken.id, "r2")], 20, "the fence")
        await wait_for(lambda: _head(owner, kept.id, kept.journal.head), 20, "kept's write")
        owner.mark(taken, ItemLog())  # ignored from now on
        owner.forget(taken.id)  # and never deleted from here
        await asyncio.sleep(0.3)
        assert await peer.redis.hgetall(f"omni:session:{taken.id}") == adopters_record
        assert adopters_record[b"fence"] == b"2"
    finally:
        for store in (owner, peer):
            await store.stop()


async def test_a_lapsed_lease_is_noticed_and_every_session_checked(redis_url: str) -> None:
    """A replica whose lease lapsed while it held it (it stalled) writes each live session
    once, which finds the ones a peer adopted even when nothing else happens to them."""
    owner = await _store(redis_url, "r1")
    peer = await _store(redis_url, "r2")
    moved: list[str] = []
    owner.on_fenced = lambda session_id, _route: moved.append(session_id)
    try:
        session = open_session().session
        owner.mark(session, ItemLog())
        await wait_for(lambda: _head(owner, session.id, session.journal.head), 20, "the write")
        await wait_for(lambda: owner._leased, 20, "a renewal")
        await peer.redis.delete("omni:replica:r1")  # what a stall past the lease leaves
        assert await peer.claim(session.id, "r1") == 2
        await wait_for(lambda: moved == [session.id], 20, "the lapse to be noticed")
    finally:
        for store in (owner, peer):
            await store.stop()


async def test_sync_waits_for_the_write_and_not_for_a_redis_that_is_away(
    redis_url: str, tmp_path: Path
) -> None:
    store = await _store(redis_url, "r1", mode="sync")
    try:
        session = open_session().session
        store.mark(session, ItemLog())
        await asyncio.wait_for(store.settled(session), 20)
        stored = await store.load(session.id)
        assert stored is not None and stored.state.head == session.journal.head
        dead = DurableStore(
            "redis://127.0.0.1:1/0", "r2", "sync", record_ttl_s=60.0, grace_s=GRACE_S
        )
        await dead.start()  # nothing listens on port 1: the store starts anyway, down
        try:
            dead.mark(session, ItemLog())
            await wait_for(lambda: not dead.up, 20, "the store to say Redis is away")
            await asyncio.wait_for(dead.settled(session), 5)  # returns at once
            # Away is not absent: a lookup or a claim says so instead of "no such session".
            with pytest.raises(StoreUnavailable):
                await dead.load(session.id)
            with pytest.raises(StoreUnavailable):
                await dead.claim(session.id, "r1")
        finally:
            await dead.stop()
    finally:
        await store.stop()


async def test_many_sessions_written_round_after_round_end_as_they_are(redis_url: str) -> None:
    """Sync writes of many sessions at once, changing while rounds are out: every wait ends,
    and every session's record and journal end exactly as the session is."""
    store = await _store(redis_url, "r1", mode="sync")
    try:
        sessions = [open_session().session for _ in range(24)]
        items = [ItemLog() for _ in sessions]
        for step in range(20):
            for session, log in zip(sessions, items, strict=True):
                session.publish(delta(f"resp_{step}"), 1.0)
                store.mark(session, log)
            await asyncio.sleep(0)  # a round may start before the next step
            waits = [store.settled(s) for s in sessions[step % 3 :: 3]]
            await asyncio.wait_for(asyncio.gather(*waits), 20)
        await asyncio.wait_for(asyncio.gather(*(store.settled(s) for s in sessions)), 20)
        for session in sessions:
            stored = await store.load(session.id)
            assert stored is not None and stored.state.head == session.journal.head
            assert [seq for seq, _ in stored.entries] == list(range(1, session.journal.head + 1))
    finally:
        await store.stop()


async def test_a_round_that_finds_the_scripts_gone_loads_them_and_writes(redis_url: str) -> None:
    """The rounds call the scripts by their hash; a Redis that lost them (SCRIPT FLUSH)
    answers NOSCRIPT, and the round loads them and writes again, the store still up."""
    store = await _store(redis_url, "r1", mode="sync")
    try:
        session = open_session().session
        store.mark(session, ItemLog())
        await asyncio.wait_for(store.settled(session), 20)
        await store.redis.script_flush()
        session.publish(created("resp_after_flush"), 1.0)
        store.mark(session, ItemLog())
        await asyncio.wait_for(store.settled(session), 20)
        assert store.up
        assert await _head(store, session.id, session.journal.head)
    finally:
        await store.stop()


async def test_the_input_and_the_unapplied_commands_are_written_with_their_number(
    redis_url: str,
) -> None:
    """What a new owner replays (server/replay_log.py) is in the store with the state whose
    applied_client_seq covers it, leaves it once the engine applied the commit, and goes
    with the session."""
    store = await _store(redis_url, "r1")
    try:
        session = open_session().session
        replay = ReplayLog(1000)
        items = ItemLog(replay)
        for seq in (1, 2):
            replay.appended(append(seq, b"\1\0"), 2)
        commit = pb.ConverseRequest(client_seq=3, commit_input_audio=pb.CommitInputAudio())
        replay.submitted("commit_input_audio", commit)
        store.mark(session, items)
        await wait_for(lambda: _replayed(store, session.id, [1, 2], [3]), 20, "the write")
        replay.appended(append(4, b"\2\0"), 2)  # the next turn, before the commit is applied
        replay.applied(3)
        store.mark(session, items)
        await wait_for(lambda: _replayed(store, session.id, [4], []), 20, "the commit to land")
        stored = await store.load(session.id)
        assert stored is not None and await store.redis.pttl(input_key(session.id)) > 0
        assert pb.ConverseRequest.FromString(stored.appends[0]).append_input_audio.audio == b"\2\0"
        store.forget(session.id)
        await wait_for(lambda: _gone(store, session.id), 20, "the record to go")
        assert await store.redis.exists(*record_keys(session.id)) == 0
    finally:
        await store.stop()


async def test_sync_holds_a_rotated_token_until_the_store_has_it(redis_url: str) -> None:
    """session_resumed carries a new token and no new seq: it waits for the store all the
    same, or an adopter would know only the token the client no longer uses."""
    store = await _store(redis_url, "r1", mode="sync")
    try:
        opened = open_session()
        session = opened.session
        store.mark(session, ItemLog())
        await asyncio.wait_for(store.settled(session), 20)
        session.detach(1, 1.0)
        resume(session, opened.token, session.journal.head, 2.0)
        before = await store.load(session.id)
        assert before is not None and before.state.token_digest != session.lock.resume.sealed()[0]
        # Nothing marked the session since: the wait itself has the new token written.
        await asyncio.wait_for(store.settled(session), 20)
        stored = await store.load(session.id)
        assert stored is not None
        assert stored.state.token_digest == session.lock.resume.sealed()[0]
    finally:
        await store.stop()


@pytest.mark.subprocess
async def test_a_resume_while_redis_is_away_is_told_to_retry_not_that_the_session_is_unknown(
    tmp_path: Path,
) -> None:
    """A replica asked to resume a session it does not hold looks it up in Redis; with Redis
    away the session may well be there (written by a peer), so the refusal is retryable
    UNAVAILABLE ``session_store_unavailable``, never NOT_FOUND, which ends a client's session for
    good. Once Redis answers, a session it does not hold is unknown again."""
    port = free_port()
    durable = settings(durability="async", redis_url=f"redis://127.0.0.1:{port}/0", route="r1")
    async with serving(durable) as running, grpc.aio.insecure_channel(running.target) as channel:
        session_id = "sess_" + secrets.token_hex(16)
        refusal = await _refused_resume(channel, session_id)
        assert refusal == (grpc.StatusCode.UNAVAILABLE, "session_store_unavailable", 0.5)
        redis = await asyncio.create_subprocess_exec(
            *redis_command(port, tmp_path), stdout=asyncio.subprocess.DEVNULL
        )
        try:
            await wait_for(lambda: running.sessions.store.up, 30, "the store to come up")
            refusal = await _refused_resume(channel, session_id)
            assert refusal == (grpc.StatusCode.NOT_FOUND, "session_resume_expired", 0.0)
        finally:
            redis.terminate()
            await redis.wait()


async def _refused_resume(
    channel: grpc.aio.Channel, session_id: str, key: str = "", token: str = "t" * 43
) -> tuple[grpc.StatusCode | None, str, float]:
    """Resumes ``session_id`` (with ``key``, when one is given); returns the refusal as the
    client reads it: status, error code (ErrorInfo) and retry hint (RetryInfo, 0 when not
    retryable)."""
    metadata = bearer_metadata(key) if key else None
    call = duplex_pb2_grpc.DuplexServiceStub(channel).Converse(metadata=metadata)
    request = pb.ResumeSession(session_id=session_id, resume_token=token)
    await call.write(pb.ConverseRequest(resume_session=request))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await read(call)
    broken = StreamBroken.from_error(refused.value)
    return broken.status, broken.code, broken.retry_after_s


async def _head(store: DurableStore, session_id: str, head: int) -> bool:
    stored = await store.load(session_id)
    return stored is not None and stored.state.head >= head


async def _route(store: DurableStore, session_id: str, route: str) -> bool:
    stored = await store.load(session_id)
    return stored is not None and stored.route == route


async def _journal_len(store: DurableStore, session_id: str, length: int) -> bool:
    return int(await store.redis.zcard(journal_key(session_id))) == length


async def _replayed(
    store: DurableStore, session_id: str, appends: list[int], commands: list[int]
) -> bool:
    stored = await store.load(session_id)
    if stored is None:
        return False
    seqs = [
        [pb.ConverseRequest.FromString(p).client_seq for p in kept]
        for kept in (stored.appends, stored.commands)
    ]
    return seqs == [appends, commands]


async def _gone(store: DurableStore, session_id: str) -> bool:
    return await store.load(session_id) is None


async def test_a_stranger_learns_no_route_and_moves_nothing(redis_url: str) -> None:
    """Another key (or a wrong token) resuming a stored session on a replica that does not hold
    it gets the answer an unknown id gets, whether the owner lives (no ``session_elsewhere``,
    no route) or is gone (no adoption); the session's own key and token then still find it."""
    owner_key, stranger = "key-owner", "key-stranger"
    replicas = [
        settings(
            durability="sync", redis_url=redis_url, route=route, api_keys=(owner_key, stranger)
        )
        for route in ("r1", "r2")
    ]
    async with (
        serving(replicas[0]) as first,
        serving(replicas[1]) as second,
        grpc.aio.insecure_channel(first.target) as to_first,
        grpc.aio.insecure_channel(second.target) as to_second,
    ):
        stub = duplex_pb2_grpc.DuplexServiceStub(to_first)
        call, created = await open_stream(stub, metadata=bearer_metadata(owner_key))
        session_id, token = created.session.id, created.resume_token
        store = second.sessions.store
        assert store is not None
        await wait_for(lambda: _route(store, session_id, "r1"), 20, "the write")
        unknown = await _refused_resume(to_second, "sess_" + secrets.token_hex(16), stranger)
        assert unknown == (grpc.StatusCode.NOT_FOUND, "session_resume_expired", 0.0)
        for key, presented in ((stranger, token), (owner_key, "t" * 43), (stranger, "t" * 43)):
            assert await _refused_resume(to_second, session_id, key, presented) == unknown
        # The owner's lease lapses (as a killed replica's does): still nothing for a stranger.
        owner_store = first.sessions.store
        assert owner_store is not None
        owner_store._tasks[1].cancel()  # its lease loop: the lease is renewed no more
        await owner_store.redis.delete(lease_key("r1"))
        assert await _refused_resume(to_second, session_id, stranger, token) == unknown
        kept = await store.load(session_id)
        assert kept is not None and kept.route == "r1"  # not claimed: no peer adopted it
        assert not second.registry.knows(session_id)
        # The session's own key and token find it: the peer adopts it for them.
        resumer = duplex_pb2_grpc.DuplexServiceStub(to_second).Converse(
            metadata=bearer_metadata(owner_key)
        )
        resume = pb.ResumeSession(session_id=session_id, resume_token=token)
        await resumer.write(pb.ConverseRequest(resume_session=resume))
        assert (await read(resumer)).WhichOneof("event") == "session_resumed"
        resumer.cancel()
        call.cancel()
