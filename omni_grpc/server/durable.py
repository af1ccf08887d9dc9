"""Sessions kept in Redis behind each event, so that a peer can adopt them (``--durability``).

One :class:`DurableStore` per replica. Hosts mark their session dirty after each call into the
core (:meth:`DurableStore.mark`, a set insertion); one writer task takes every dirty session and
writes, in one pipelined MULTI/EXEC per round, what changed since the last round: the session's
state (``omni_grpc.core.snapshot``), the journal entries numbered since (a sorted set scored by
seq, trimmed to what the client has not acknowledged), the conversation items, and what a new
owner must replay into its engine (:mod:`omni_grpc.server.replay_log`: the uncommitted input,
a list per session, and the commands the engine had not applied yet). In ``sync`` mode a
stream's writer waits for the write before each event goes on the wire (:meth:`settled`), so a
client never holds an event the store has not.

A round is one round trip: the Lua scripts are loaded once (again after Redis comes back, or
says it lost them) and the rounds call them by their hash (a pipeline that names a script
object would first ask Redis whether it has it, a round trip of its own before every round).
One round is in flight at a time, and the next carries every session that changed meanwhile:
on a busy machine each extra round, and each extra turn of the event loop between rounds,
costs more than the wait it saves (see docs/measurements/2026-12-07-sync-durability.md). A
``sync`` waiter goes as soon as the round holding its event is back, even if its session
numbered more events while the round was out.

Each replica keeps a lease, ``omni:replica:<route>``, refreshed every :data:`LEASE_REFRESH_S`
and gone :data:`LEASE_TTL_S` after the replica stops refreshing it (killed), or set to
``draining`` by a drain. A peer adopts a session only when its owner's lease is gone, or the
owner handed the session over (its route cleared from the record) while draining: a live owner
keeps its sessions, and the resume is told to retry (the proxy takes it to the owner).

Every write is fenced (:mod:`omni_grpc.server.fence`): a record carries an epoch, bumped by
each adoption, and a replica's write or delete goes through only while the epoch is the one it
holds. A replica that stalled past its lease and wakes after a peer adopted a session finds the
write refused (and, on its next renewal, its lease lapsed, so it writes every session once to
learn which it lost); it then drops the session from memory and ends its stream with
``going_away`` (reason ``session_moved``), through :attr:`DurableStore.on_fenced`, so the client
resumes at the adopter. In ``sync`` mode no event numbered by the stale copy reaches a client.

Redis being away is not fatal: the store says it is down (health, ``omni_durability_up``),
sessions go on in memory, and the writer retries; when Redis is back every live session is
written whole again (Redis may have come back empty).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import Counter, Gauge
from redis.exceptions import NoScriptError, RedisError

from omni_grpc.core import Session, State
from omni_grpc.core.snapshot import SessionState, export_state
from omni_grpc.server import fence
from omni_grpc.server.fence import (
    commands_key,
    input_key,
    journal_key,
    lease_key,
    record_keys,
    session_key,
)
from omni_grpc.server.replay_log import ReplayLog
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

MODES = ("off", "async", "sync")
LEASE_TTL_S = 3.0
LEASE_REFRESH_S = 0.5
RETRY_S = 0.5  # between attempts while Redis is away
# A stored session outlives its last write by this much beyond the disconnect grace.
RECORD_SLACK_S = 60.0

DURABILITY_UP = Gauge(
    "omni_durability_up", "1 while the session store (Redis) takes writes, 0 while it is away."
)
DURABILITY_ERRORS = Counter(
    "omni_durability_write_errors", "Rounds of session writes that failed (Redis away)."
)
DURABILITY_ROUNDS = Counter("omni_durability_rounds", "Rounds of session writes to Redis.")
ADOPTIONS = Counter("omni_sessions_adopted", "Sessions adopted from the store, by why.", ["why"])
HANDOVERS = Counter("omni_sessions_handed_over", "Sessions a draining replica handed over.")
FENCED = Counter(
    "omni_durability_fenced_writes",
    "Session writes Redis refused: a peer adopted the session, this replica's copy is stale.",
)
MOVED = Counter(
    "omni_sessions_moved",
    "Sessions dropped here because a peer adopted them while this replica stalled.",
)
LEASES_LOST = Counter(
    "omni_durability_leases_lost", "Times this replica found its lease lapsed (it stalled)."
)


class StoreUnavailable(Exception):
    """Redis did not answer: what it holds is unknown, which is not the same as absent."""


@dataclass(slots=True)
class Stored:
    """A session as the store holds it: its state, journal entries, items and owner, and
    what its new owner replays into its engine (:func:`replay_log.replay_order`)."""

    state: SessionState
    entries: list[tuple[int, bytes]]
    items: list[pb.ConversationItem]
    route: str
    appends: list[bytes] = field(default_factory=list)
    commands: list[bytes] = field(default_factory=list)


class ItemLog:
    """The conversation items of one session, in order, as its events tell them, and the
    session's :class:`ReplayLog` (written with them)."""

    def __init__(self, replay: ReplayLog | None = None) -> None:
        self._items: collections.OrderedDict[str, pb.ConversationItem] = collections.OrderedDict()
        self.changed = False
        self.replay = replay
        # The out-of-band responses running: their items are in no conversation.
        self._side: set[str] = set()

    def observe(self, kind: str | None, event: pb.ConverseResponse) -> None:
        """Follows one engine event: finished items enter, deleted ones leave; an out-of-band
        response's items enter nothing."""
        if kind == "item_done":
            if event.item_done.response_id not in self._side:
                self._put(event.item_done.item)
        elif kind == "response_created":
            response = event.response_created.response
            if response.conversation == pb.RESPONSE_CONVERSATION_NONE:
                self._side.add(response.id)
        elif kind == "response_done":
            response = event.response_done.response
            self._side.discard(response.id)
            if response.conversation == pb.RESPONSE_CONVERSATION_NONE:
                return
            for item in response.output:
                self._put(item)
        elif kind == "item_deleted":
            self._items.pop(event.item_deleted.item_id, None)
            self.changed = True

    def _put(self, item: pb.ConversationItem) -> None:
        if item.id:
            self._items[item.id] = item
            self.changed = True

    def serialized(self) -> bytes:
        """The items as one message (a Response's output list), for the store."""
        self.changed = False
        return pb.Response(output=list(self._items.values())).SerializeToString()


@dataclass(slots=True)
class _Written:
    """What the store holds of one session: its head and trim point, or nothing yet."""

    head: int = -1  # -1: nothing written (or Redis came back and may be empty)
    dropped: int = 0
    token: bytes = b""  # the resume token digest written
    epoch: int = 1  # the fencing token this replica holds (bumped by each adoption)
    # Whether a missing record may be made: at the first write, or when Redis came back empty;
    # otherwise a missing record means a peer adopted the session and ended it.
    may_create: bool = True
    # sync mode's waiters, each with the journal head it waits for.
    waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)


class DurableStore:
    """The Redis side of one replica's sessions; see the module docstring."""

    def __init__(
        self, url: str, route: str, mode: str, *, record_ttl_s: float, grace_s: float
    ) -> None:
        if mode not in ("async", "sync"):
            raise ValueError(f"durability must be one of {MODES}")
        self.route = route
        self.mode = mode
        self.redis: aioredis.Redis = aioredis.from_url(
            url, socket_timeout=2.0, socket_connect_timeout=2.0
        )
        self.up = False
        self.draining = False
        self._record_ttl_ms = int((record_ttl_s + RECORD_SLACK_S) * 1000)
        # A detached session's record lapses with its disconnect grace (counted from its last
        # write), so a peer does not bring back a session its owner would have expired.
        self._detached_ttl_ms = int(grace_s * 1000)
        self._live: dict[str, tuple[Session, ItemLog]] = {}
        self._dirty: dict[str, tuple[Session, ItemLog]] = {}
        self._gone: dict[str, int] = {}  # ended sessions to delete, with their epochs
        self._written: dict[str, _Written] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._scripts_loaded = False  # WRITE and DROP are in Redis's script cache
        self._stopped = False
        self._fenced: set[str] = set()  # sessions a peer adopted: never written from here again
        self.rounds = 0  # rounds of writes done (the test hook of fault_hook waits on it)
        self._leased = False  # held the lease at the last renewal (a lapse means a stall)
        # Called with (session id, the adopter's route) when a write finds the session adopted.
        self.on_fenced: Callable[[str, str], None] | None = None
        self._claim = self.redis.register_script(fence.CLAIM)
        self._write = self.redis.register_script(fence.WRITE)
        self._drop = self.redis.register_script(fence.DROP)
        self._renew = self.redis.register_script(fence.RENEW)
        DURABILITY_UP.set(0)

    async def start(self) -> None:
        """Starts the writer and the lease (Redis may be away: both keep trying)."""
        await self._renew_lease()
        with contextlib.suppress(RedisError, OSError):
            await self._load_scripts()  # else at the first round
        self._tasks = [
            asyncio.create_task(self._write_loop()),
            asyncio.create_task(self._lease_loop()),
        ]

    async def stop(self) -> None:
        """Writes what is dirty (if Redis is there), drops the lease, and closes; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(RedisError, OSError):
            await self._write_round(*self._take_round())
            await self.redis.delete(lease_key(self.route))
        await self.redis.aclose()

    # -- the owner's side ------------------------------------------------------------------

    def mark(self, session: Session, items: ItemLog) -> None:
        """The session changed: the next round writes it."""
        if session.id in self._fenced:
            return
        self._live[session.id] = self._dirty[session.id] = (session, items)
        self._wake.set()

    def forget(self, session_id: str) -> None:
        """The session ended: the next round deletes its record."""
        self._live.pop(session_id, None)
        self._dirty.pop(session_id, None)
        if session_id in self._fenced:
            return
        written = self._written.pop(session_id, None)
        self._gone[session_id] = written.epoch if written is not None else 1
        self._release_waiters(written)
        self._wake.set()

    def adopted(self, session_id: str, epoch: int) -> None:
        """This replica won the session at ``epoch`` (:meth:`claim`): its writes carry it."""
        self._fenced.discard(session_id)
        self._written[session_id] = _Written(epoch=epoch, may_create=False)

    async def settled(self, session: Session) -> None:
        """In ``sync`` mode, returns once the store holds every event numbered so far."""
        if self.mode != "sync" or not self.up or session.id not in self._live:
            return  # an ended session's record is deleted, not written: nothing to wait for
        written = self._written.get(session.id)
        head = session.journal.head
        if (
            written is not None
            and written.head >= head
            # A rotated resume token (in session_resumed) goes out only once the store holds
            # it: an adopter that knew only the old one would refuse the client's new one.
            and written.token == session.lock.resume.sealed()[0]
        ):
            return
        waiter = asyncio.get_running_loop().create_future()
        # Released by the first round that writes this head, even if the session numbered
        # more events while that round was out: those wait for the next one, not this event.
        self._written.setdefault(session.id, _Written()).waiters.append((head, waiter))
        # A waiter always has a round coming that writes its session: a change nobody marked
        # (a token rotated, or rolled back, with no event) would otherwise hold it for good.
        self._dirty.setdefault(session.id, self._live[session.id])
        self._wake.set()
        await waiter

    async def hand_over(self, session: Session, items: ItemLog) -> None:
        """A draining owner's last write of a session: whole, with its route cleared."""
        self._live.pop(session.id, None)
        self._dirty.pop(session.id, None)
        held = self._written.pop(session.id, None) or _Written()
        whole = _Written(epoch=held.epoch, may_create=held.may_create)
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                await self._queue_session(pipe, session, items, whole, route="")
                (result,) = await pipe.execute()
        except (RedisError, OSError):
            logger.warning("session %s: could not hand it over (Redis away)", session.id)
            return
        if result[0] == 1:
            HANDOVERS.inc()
        else:
            FENCED.inc()
            logger.warning("session %s: not handed over, a peer had adopted it", session.id)

    async def _write_loop(self) -> None:
        """One round after another while something is dirty. A round that ends with more
        dirty goes straight on to the next, on the same turn of the loop (the event is set:
        no wait), so under load each round carries every session that changed meanwhile."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._write_round(*self._take_round())
            except (RedisError, OSError) as error:
                self._went_down(error)
                await asyncio.sleep(RETRY_S)
                self._wake.set()

    def _take_round(self) -> tuple[dict[str, tuple[Session, ItemLog]], dict[str, int]]:
        dirty, self._dirty = self._dirty, {}
        gone, self._gone = self._gone, {}
        return dirty, gone

    def _put_back(self, dirty: dict[str, tuple[Session, ItemLog]], gone: dict[str, int]) -> None:
        """A round that failed: its sessions are dirty again (and, since Redis may have lost
        them, written whole: :meth:`_went_down`)."""
        _rewrite_replay(dirty)  # the round took their changes: the next writes them whole
        for session_id, value in dirty.items():
            self._dirty.setdefault(session_id, value)
        for session_id, epoch in gone.items():
            self._gone.setdefault(session_id, epoch)

    async def _write_round(
        self, dirty: dict[str, tuple[Session, ItemLog]], gone: dict[str, int]
    ) -> None:
        """Writes ``dirty`` and deletes ``gone`` in one MULTI/EXEC, one round trip, and takes
        in what it wrote; on a failure both are put back and the error raised."""
        if not dirty and not gone:
            return
        try:
            try:
                pipe, heads = await self._queue_round(dirty, gone)
                async with pipe:
                    results = await pipe.execute()
            except NoScriptError:
                # Redis lost its script cache (SCRIPT FLUSH, or a restart not seen yet): load
                # them and write again. Each write brings the record up to the same state,
                # so a script that did run before the error runs again to the same effect
                # (the replay lists written whole: their changes were taken already).
                self._scripts_loaded = False
                _rewrite_replay(dirty)
                pipe, heads = await self._queue_round(dirty, gone)
                async with pipe:
                    results = await pipe.execute()
        except BaseException:
            self._put_back(dirty, gone)
            raise
        DURABILITY_ROUNDS.inc()
        self.rounds += 1
        self._came_up()
        for (session_id, (head, dropped, token)), result in zip(
            heads.items(), results, strict=False
        ):
            if (kept := self._written.get(session_id)) is None:
                continue  # it ended while the round was written
            if result[0] != 1:
                self._fence(session_id, _text(result[1]))
                continue
            kept.head, kept.dropped, kept.may_create, kept.token = head, dropped, False, token
            # Each waiter goes as soon as its own event is written, even if the session
            # numbered more while the round was out (those wait for the next round); none
            # while the token written is not the session's now (its next round writes it).
            if token == dirty[session_id][0].lock.resume.sealed()[0]:
                self._release_waiters(kept, head)

    async def _queue_round(
        self, dirty: dict[str, tuple[Session, ItemLog]], gone: dict[str, int]
    ) -> tuple[Any, dict[str, tuple[int, int, bytes]]]:
        """A pipeline (MULTI/EXEC) with the writes of ``dirty`` and the deletions of
        ``gone`` queued, and the head, trim point and token digest each write brings the
        store to. Nothing is sent but, once per Redis, the scripts (so the pipeline calls
        them by hash and need not ask Redis first whether it has them, a round trip of its
        own)."""
        if not self._scripts_loaded:
            await self._load_scripts()
        pipe = self.redis.pipeline(transaction=True)
        heads = {}
        for session_id, (session, items) in dirty.items():
            written = self._written.setdefault(session_id, _Written())
            heads[session_id] = await self._queue_session(
                pipe, session, items, written, route=self.route
            )
        for session_id, epoch in gone.items():
            await self._drop(keys=record_keys(session_id), args=[epoch], client=pipe)
        pipe.scripts.clear()  # loaded above: no SCRIPT EXISTS before the round
        return pipe, heads

    async def _load_scripts(self) -> None:
        for script in (self._write, self._drop):
            await self.redis.script_load(script.script)
        self._scripts_loaded = True

    def _fence(self, session_id: str, owner: str) -> None:
        """A peer adopted the session: it leaves this replica's memory and is never written
        from here again. The stream's end (on_fenced) comes before the sync waiters go, so no
        event the stale copy numbered goes out."""
        FENCED.inc()
        logger.warning(
            "session %s: a peer (%s) adopted it; this replica's copy is stale and goes",
            session_id,
            owner or "unknown",
            extra={"session_id": session_id},
        )
        self._fenced.add(session_id)
        self._live.pop(session_id, None)
        self._dirty.pop(session_id, None)
        written = self._written.pop(session_id, None)
        if self.on_fenced is not None:
            self.on_fenced(session_id, owner)
        self._release_waiters(written)

    async def _queue_session(
        self, pipe: Any, session: Session, items: ItemLog, written: _Written, *, route: str
    ) -> tuple[int, int, bytes]:
        """Queues the writes that bring the store up to ``session``; returns (head, dropped,
        the token digest written)."""
        state = export_state(session)
        whole = written.head < 0
        if whole:
            items.changed = True
        entries = session.journal.entries_after(
            state.dropped_through if whole else max(written.head, state.dropped_through)
        )
        trim = (
            state.dropped_through if not whole and state.dropped_through > written.dropped else -1
        )
        fields: dict[str, bytes] = {**state.to_fields(), "route": route.encode()}
        if items.changed:
            fields["items"] = items.serialized()
        detached = session.state is State.DETACHED
        ttl_ms = self._detached_ttl_ms if detached else self._record_ttl_ms
        drop, appends, commands = (
            items.replay.take_changes(whole) if items.replay is not None else (-1, [], None)
        )
        args: list[Any] = [written.epoch, int(written.may_create), int(whole), ttl_ms, trim]
        args += [len(fields), drop, len(appends), -1 if commands is None else len(commands)]
        for name, value in fields.items():
            args += [name, value]
        args += appends
        args += commands or []
        for seq, payload in entries:
            args += [seq, payload]
        # Queued on the pipeline (redis-py loads the script before the pipeline runs).
        await self._write(keys=record_keys(session.id), args=args, client=pipe)
        return state.head, state.dropped_through, state.token_digest

    def _went_down(self, error: Exception) -> None:
        DURABILITY_ERRORS.inc()
        if self.up:
            logger.warning("durability: Redis is away (%s); sessions go on in memory", error)
        self.up = False
        DURABILITY_UP.set(0)
        self._scripts_loaded = False  # Redis may come back without them
        self._leased = False  # a lease missing when Redis is back says nothing of a stall
        for written in self._written.values():
            written.head = -1  # Redis may come back empty: write every session whole
            written.may_create = True
            self._release_waiters(written)  # sync mode does not wait for a store that is away

    def _came_up(self) -> None:
        if not self.up:
            logger.info("durability: Redis takes writes")
            self.up = True
            DURABILITY_UP.set(1)
            # Every session is written whole once more (see _went_down).
            for session, items in list(self._live.values()):
                self.mark(session, items)

    @staticmethod
    def _release_waiters(written: _Written | None, head: int | None = None) -> None:
        """Releases the waiters of ``written`` for a journal head up to ``head`` (all of them
        when None: the session ended, moved, or the store is away)."""
        if written is None or not written.waiters:
            return
        waiting = []
        for need, waiter in written.waiters:
            if head is not None and need > head:
                waiting.append((need, waiter))
            elif not waiter.done():
                waiter.set_result(None)
        written.waiters = waiting

    # -- the lease -------------------------------------------------------------------------

    async def set_draining(self) -> None:
        """Tells peers this replica drains: they may adopt what it hands over."""
        self.draining = True
        await self._renew_lease()

    async def _lease_loop(self) -> None:
        while True:
            await asyncio.sleep(LEASE_REFRESH_S)
            await self._renew_lease()

    async def _renew_lease(self) -> None:
        state = b"draining" if self.draining else b"serving"
        try:
            held = await self._renew(
                keys=[lease_key(self.route)], args=[state, int(LEASE_TTL_S * 1000)]
            )
        except (RedisError, OSError) as error:
            self._went_down(error)
            return
        if not self.up:
            self._came_up()
        elif self._leased and not held:
            # The lease lapsed while this replica held it: it stalled, and a peer may have
            # adopted some sessions meanwhile. Each live session is written once: the fenced
            # write refuses (and drops here) every one that moved.
            LEASES_LOST.inc()
            logger.warning("durability: this replica's lease had lapsed; checking its sessions")
            for session, items in list(self._live.values()):
                self.mark(session, items)
        self._leased = True

    # -- the adopter's side ----------------------------------------------------------------

    async def load(self, session_id: str) -> Stored | None:
        """The stored session, or None when the store has none; raises StoreUnavailable when
        Redis does not answer (the session may well be there: a resume must not be told it is
        unknown, which ends the client's session for good)."""
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hgetall(session_key(session_id))
                pipe.zrange(journal_key(session_id), 0, -1, withscores=True)
                pipe.lrange(input_key(session_id), 0, -1)
                pipe.lrange(commands_key(session_id), 0, -1)
                record, journal, appends, commands = await pipe.execute()
        except (RedisError, OSError) as error:
            self._went_down(error)
            raise StoreUnavailable(str(error)) from error
        if not record:
            return None
        try:
            state = SessionState.from_fields(record)
        except (KeyError, ValueError):
            logger.warning("session %s: its stored record is broken", session_id)
            return None
        items = list(pb.Response.FromString(record.get(b"items", b"")).output)
        entries = sorted((int(seq), payload) for payload, seq in journal)
        route = record.get(b"route", b"").decode()
        return Stored(state, entries, items, route, list(appends), list(commands))

    async def owner_lease(self, route: str) -> str | None:
        """``serving``, ``draining``, or None when the owner's lease is gone."""
        try:
            value = await self.redis.get(lease_key(route))
        except (RedisError, OSError) as error:
            self._went_down(error)
            return "serving"  # unknown: never adopt from a live owner by mistake
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    async def claim(self, session_id: str, owner: str) -> int:
        """Makes this replica the owner, if ``owner`` still is: returns the session's new
        epoch (its fencing token, see :meth:`adopted`), or 0 if a peer was first; raises
        StoreUnavailable when Redis does not answer."""
        try:
            epoch = await self._claim(keys=[session_key(session_id)], args=[owner, self.route])
        except (RedisError, OSError) as error:
            self._went_down(error)
            raise StoreUnavailable(str(error)) from error
        return int(epoch)


def _rewrite_replay(dirty: dict[str, tuple[Session, ItemLog]]) -> None:
    for _, items in dirty.values():
        if items.replay is not None:
            items.replay.rewrite()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


__all__ = [
    "ADOPTIONS",
    "FENCED",
    "MODES",
    "MOVED",
    "DurableStore",
    "ItemLog",
    "StoreUnavailable",
    "Stored",
    "commands_key",
    "input_key",
    "journal_key",
    "lease_key",
    "record_keys",
    "session_key",
]
