"""Short-lived client secrets: what an app's backend mints so that a browser never holds its key.

The backend mints one at ``POST /v1/realtime/client_secrets`` (:mod:`bridge.minting`); the page
then opens the websocket with the subprotocol ``openai-insecure-api-key.ek_…``, and
:mod:`bridge.gate` redeems it. This module is the store of the secrets minted. A secret:

* lives ``expires_after.seconds`` of the request's body (10 s to 2 h; 60 s when not given);
* opens one websocket: it is used up by the upgrade it admits, so a resume needs a new one;
* stands for the key that minted it: the bridge presents that key to the service, so the
  session is bound to it (a resume with another secret of the same key finds the session);
* carries the session configuration it was minted with, if any (the body's ``session``, as
  OpenAI's secrets do): the socket it opens starts its session with that configuration;
* is kept only as its SHA-256 digest and compared in constant time, and is never logged.

Each key mints for itself, so no key's minting can stop another's: at most the tenant policy's
``client_secrets`` of its secrets wait to be used at once, and it mints at most ``mints_per_s``
a second (a bucket holding ``mint_burst_s`` of that; :mod:`omni_grpc.wire.tenant_policy`).
Past either, its minting is
refused with a retry hint (:class:`TooManySecrets`); the other keys mint on. The keys are the
bridge's own, so the store holds at most that many secrets per key.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from omni_grpc.wire import pb
from omni_grpc.wire.tenant_policy import TenantPolicy

PREFIX = "ek_"
DEFAULT_TTL_S = 60.0
MIN_TTL_S = 10.0
MAX_TTL_S = 7200.0
# How soon a key whose secrets all wait to be used may try again: pages use them up as they load.
OUTSTANDING_RETRY_AFTER_S = 1.0


class TooManySecrets(Exception):
    """Minting refused for the key: too many of its secrets wait, or it mints too fast."""

    def __init__(self, message: str, code: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after_s = retry_after_s


class _MintBucket:
    """Mints a key may make: a token bucket that starts full."""

    __slots__ = ("capacity", "rate_per_s", "tokens", "updated_at")

    def __init__(self, rate_per_s: float, burst_s: float, now: float) -> None:
        self.rate_per_s = rate_per_s
        self.capacity = max(rate_per_s * burst_s, 1.0)
        self.tokens = self.capacity
        self.updated_at = now

    def wait_s(self, now: float) -> float:
        """Seconds until a mint passes (0: now, and it is taken)."""
        elapsed = max(now - self.updated_at, 0.0)
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate_per_s)
        self.updated_at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate_per_s


@dataclass(frozen=True, slots=True)
class Redeemed:
    """What a secret stood for, once used."""

    key: str  # the API key that minted it, presented to the service in its place
    session: pb.SessionConfig | None = None  # the configuration its session starts with


@dataclass(frozen=True, slots=True)
class _Minted:
    digest: bytes
    owner_key: str
    expires_at: float
    session: pb.SessionConfig | None


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


class ClientSecrets:
    """The secrets minted and not yet used or expired, by digest."""

    def __init__(
        self, clock: Callable[[], float] = time.time, *, tenants: TenantPolicy | None = None
    ) -> None:
        self._clock = clock
        tenants = tenants if tenants is not None else TenantPolicy()
        self._per_key = tenants.client_secrets
        self._mints_per_s = tenants.mints_per_s
        self._mint_burst_s = tenants.mint_burst_s
        self._minted: dict[bytes, _Minted] = {}
        self._outstanding: Counter[str] = Counter()  # by the key that minted them
        self._buckets: dict[str, _MintBucket] = {}

    def __len__(self) -> int:
        return len(self._minted)

    def mint(
        self,
        owner_key: str,
        ttl_s: float = DEFAULT_TTL_S,
        session: pb.SessionConfig | None = None,
    ) -> tuple[str, float]:
        """A new secret standing for ``owner_key`` (and opening its session with ``session``
        when given), and when it expires (unix seconds)."""
        if not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
            raise ValueError(f"a secret lives {MIN_TTL_S:g} to {MAX_TTL_S:g} seconds")
        now = self._clock()
        # The bucket first: a key at its bound pays for each attempt, so its attempts (and the
        # look for expired secrets each makes) come at most at the bucket's rate.
        bucket = self._buckets.get(owner_key)
        if bucket is None:
            bucket = self._buckets[owner_key] = _MintBucket(
                self._mints_per_s, self._mint_burst_s, now
            )
        if wait := bucket.wait_s(now):
            raise TooManySecrets(
                "this key mints client secrets too fast",
                "rate_limit_exceeded",
                math.ceil(wait * 1000) / 1000,
            )
        if self._outstanding[owner_key] >= self._per_key:
            self._forget_expired()
            if self._outstanding[owner_key] >= self._per_key:
                raise TooManySecrets(
                    f"{self._per_key} client secrets of this key wait to be used",
                    "client_secrets_outstanding",
                    OUTSTANDING_RETRY_AFTER_S,
                )
        value = PREFIX + secrets.token_urlsafe(32)
        minted = _Minted(_digest(value), owner_key, now + ttl_s, session)
        self._minted[minted.digest] = minted
        self._outstanding[owner_key] += 1
        return value, minted.expires_at

    def redeem(self, presented: str) -> Redeemed | None:
        """Uses ``presented`` up; returns what it stands for, or None if it is not valid."""
        if not presented.startswith(PREFIX):
            return None
        digest = _digest(presented)
        minted = self._minted.pop(digest, None)
        # The lookup is by digest (learning its timing tells nothing of the secret); the
        # comparison is made in constant time all the same.
        if minted is None or not hmac.compare_digest(minted.digest, digest):
            return None
        self._outstanding[minted.owner_key] -= 1
        if self._clock() >= minted.expires_at:
            return None
        return Redeemed(minted.owner_key, minted.session)

    def _forget_expired(self) -> None:
        now = self._clock()
        for digest in [d for d, minted in self._minted.items() if minted.expires_at <= now]:
            self._outstanding[self._minted.pop(digest).owner_key] -= 1
