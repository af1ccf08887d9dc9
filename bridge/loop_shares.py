"""Each API key's share of one pass of the event loop: its sockets' commands take turns.

A relay's reader hands a client's commands on as fast as its socket has them, and asyncio runs
every task that is ready once per pass of its loop. Twenty sockets of one key sending appends
as fast as they could (``scripts/bench_tenants.py --only append-flood``) each ran a slice of
1-2 ms per pass, so every other key's command waited behind 20-40 ms of them: its round trip
p99 was 20-30 ms against 1-4 ms unloaded. Capping each reader's own slice changed nothing, as
the pass is the sum of the key's readers. So the cap is the key's: once the commands of a key's
sockets have taken their slice of the loop (handing them on, measured around each; the tenant
policy's ``loop_slice_s``, 1 ms, :mod:`omni_grpc.wire.tenant_policy`), its readers wait for
the next pass, where the key starts afresh (about 15 appends a pass here). A command
is only put off, never refused: a key with many busy sockets spreads over more passes. With it, that
flood's victim measured p99 6.5 ms against 25 ms without (back to back, 2 cores, load under 1).
The empty key, and every client of a bridge without keys (all one tenant), has no share.
"""

from __future__ import annotations

import asyncio

from omni_grpc.wire.tenant_policy import LOOP_SLICE_S


class LoopShares:
    """The loop time each key's commands have taken in the current pass."""

    __slots__ = ("_new_pass_due", "_slice_s", "_spent")

    def __init__(self, slice_s: float = LOOP_SLICE_S) -> None:
        self._slice_s = slice_s  # how much of one pass one key's commands may take
        self._spent: dict[str, float] = {}
        self._new_pass_due = False

    def of(self, key: str) -> KeyShare | None:
        """The share of ``key``'s sockets (None for the empty key: not bounded)."""
        return KeyShare(self, key) if key else None

    def used_up(self, key: str) -> bool:
        """Whether ``key``'s commands have taken their slice of this pass (one command always
        runs in a pass, whatever the slice)."""
        spent = self._spent.get(key)
        return spent is not None and spent >= self._slice_s

    def spend(self, key: str, seconds: float) -> None:
        spent = self._spent.get(key, 0.0) + seconds
        self._spent[key] = spent
        if spent >= self._slice_s and not self._new_pass_due:
            # Runs first in the next pass, before the readers that wait for it (they were
            # scheduled after it); until then every used-up key waits.
            self._new_pass_due = True
            asyncio.get_running_loop().call_soon(self._new_pass)

    def _new_pass(self) -> None:
        self._spent.clear()
        self._new_pass_due = False


class KeyShare:
    """One key's share, as one of its relays sees it."""

    __slots__ = ("_key", "_shares")

    def __init__(self, shares: LoopShares, key: str) -> None:
        self._shares = shares
        self._key = key

    async def turn(self) -> None:
        """Returns at once while the key has loop time left in this pass, else in a later one."""
        # Not an Event: the wait is for the tasks ready now to run first, which sleep(0) is.
        while self._shares.used_up(self._key):  # noqa: ASYNC110
            await asyncio.sleep(0)  # behind every task already ready: the others' turn

    def spent(self, seconds: float) -> None:
        """Charges the loop time one command took to hand on."""
        self._shares.spend(self._key, seconds)


__all__ = ["KeyShare", "LoopShares"]
