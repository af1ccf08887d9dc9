"""Fair shares per API key: what one key may hold and how fast it may start sessions.

Token buckets per key (``rate_limits.py``) bound the commands and audio a key sends; these bound
what it holds and starts, so that no key takes the service from the others. The numbers, and
how each is derived from the settings, are the tenant policy's
(:class:`~omni_grpc.wire.tenant_policy.TenantPolicy`); this is the mechanism:

* **Sessions.** No key holds more than the policy's ``sessions`` live sessions (by default,
  with two keys or more, three quarters of the sessions the server serves at once, so that
  another key can always get in). One past it is refused ``resource_exhausted``, retryable, as
  a full server refuses. A server with one key, or none, has no share: the key is the tenant.
* **Memory.** Each key's sessions together hold at most the policy's ``memory_bytes`` (input
  audio, and the frames a bridge in the same process holds in flight for the key): a
  :class:`~omni_grpc.core.budget.MemoryBudget` of its own, checked by ``admission.py`` beside
  the server's.
* **Opens and resumes.** Every key has a bucket of opens and one of resumes (the policy's
  ``opens_per_s`` and ``resumes_per_s``, holding ``burst_s`` of their rate). An open or resume
  that finds its bucket empty is refused ``rate_limit_exceeded``, retryable, with the time
  until it would pass; an open refused for its share has still used its token (it cost an
  attempt), a refusal for rate takes nothing.

The keys are the server's, known up front, so no client can add one. Everything is arithmetic
on the ``now`` the caller passes in.
"""

from __future__ import annotations

import math

from omni_grpc.core.budget import MemoryBudget
from omni_grpc.core.credentials import SessionLock
from omni_grpc.core.errors import Status, StreamRefused
from omni_grpc.core.rate_limits import MIN_RETRY_AFTER_S, TokenBucket
from omni_grpc.wire.tenant_policy import TenantPolicy


class KeyShares:
    """The shares and start buckets of each configured API key (see the module)."""

    __slots__ = ("_budgets", "_digests", "_opens", "_resumes", "_retry_after_s", "_sessions")

    def __init__(
        self, keys: tuple[str, ...], tenants: TenantPolicy, now: float, retry_after_s: float
    ) -> None:
        self._sessions = tenants.sessions  # 0: no share of its own
        self._retry_after_s = retry_after_s  # of a refusal for the share: a full server's
        burst = tenants.burst_s
        self._opens = {key: TokenBucket(tenants.opens_per_s, burst, now) for key in keys}
        self._resumes = {key: TokenBucket(tenants.resumes_per_s, burst, now) for key in keys}
        # The digest a session keeps of the key that opened it: how its sessions are counted.
        self._digests = {key: SessionLock(key).owner_digest for key in keys}
        share_bytes = tenants.memory_bytes
        self._budgets = (
            {key: MemoryBudget(share_bytes) for key in keys} if share_bytes is not None else {}
        )

    def budget(self, key: str) -> MemoryBudget | None:
        """The share of the memory budget ``key`` holds against (None: the server's only)."""
        return self._budgets.get(key)

    def digest(self, key: str) -> bytes | None:
        """The owner digest of ``key``'s sessions (None for a key that is not configured)."""
        return self._digests.get(key)

    def admit_open(self, key: str, held: int, now: float) -> None:
        """Takes an open of ``key``, which holds ``held`` live sessions; raises StreamRefused
        when its bucket is empty (nothing taken) or it holds its share."""
        self.take_open(key, now)
        if self.over_share(key, held):
            raise self.share_refusal()

    def take_open(self, key: str, now: float) -> None:
        """Takes a token of ``key``'s opens; raises StreamRefused when there is none."""
        bucket = self._opens.get(key)
        if bucket is not None:
            _take(bucket, now, "session opens")

    def over_share(self, key: str, held: int) -> bool:
        """Whether ``key``, holding ``held`` sessions (live, or admitted and opening), may not
        have one more: a queue lets such a key wait behind the others' requests."""
        return key in self._opens and bool(self._sessions) and held >= self._sessions

    def share_refusal(self) -> StreamRefused:
        """The refusal of an open past its key's share (retryable, as a full server's)."""
        return StreamRefused(
            Status.RESOURCE_EXHAUSTED,
            "resource_exhausted",
            f"this API key holds its share of sessions: limit={self._sessions}",
            retryable=True,
            retry_after_s=self._retry_after_s,
        )

    def admit_resume(self, key: str, now: float) -> None:
        """Takes a resume of ``key``; raises StreamRefused when its bucket is empty."""
        bucket = self._resumes.get(key)
        if bucket is not None:
            _take(bucket, now, "resumes")


def _take(bucket: TokenBucket, now: float, what: str) -> None:
    wait = bucket.wait_s(1, now)
    if wait:
        retry_after_s = max(math.ceil(wait * 1000) / 1000, MIN_RETRY_AFTER_S)
        raise StreamRefused(
            Status.RESOURCE_EXHAUSTED,
            "rate_limit_exceeded",
            f"too many {what} for this API key; retry after {retry_after_s:.3f} s",
            retryable=True,
            retry_after_s=retry_after_s,
        )
    bucket.spend(1)


__all__ = ["KeyShares"]
