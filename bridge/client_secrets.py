"""Short-lived client secrets: what an app's backend mints so that a browser never holds its key.

The backend mints one at ``POST /v1/realtime/client_secrets`` (:mod:`bridge.minting`); the page
then opens the websocket with the subprotocol ``openai-insecure-api-key.ek_…``, and
:mod:`bridge.gate` redeems it. This module is the store of the secrets minted. A secret:

* lives ``expires_after.seconds`` of the request's body (10 s to 2 h; 60 s when not given);
* opens one websocket: it is used up by the upgrade it admits, so a resume needs a new one;
* stands for the key that minted it: the bridge presents that key to the service, so the
  session is bound to it (a resume with another secret of the same key finds the session);
* is kept only as its SHA-256 digest and compared in constant time, and is never logged.

At most ``MAX_OUTSTANDING`` secrets wait to be used; past that, minting is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

PREFIX = "ek_"
DEFAULT_TTL_S = 60.0
MIN_TTL_S = 10.0
MAX_TTL_S = 7200.0
MAX_OUTSTANDING = 10_000


class TooManySecrets(Exception):
    """Minting refused: ``MAX_OUTSTANDING`` secrets are waiting to be used."""


@dataclass(frozen=True, slots=True)
class _Minted:
    digest: bytes
    owner_key: str  # the API key that minted it, presented to the service in its place
    expires_at: float


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


class ClientSecrets:
    """The secrets minted and not yet used or expired, by digest."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._minted: dict[bytes, _Minted] = {}

    def __len__(self) -> int:
        return len(self._minted)

    def mint(self, owner_key: str, ttl_s: float = DEFAULT_TTL_S) -> tuple[str, float]:
        """A new secret standing for ``owner_key``, and when it expires (unix seconds)."""
        if not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
            raise ValueError(f"a secret lives {MIN_TTL_S:g} to {MAX_TTL_S:g} seconds")
        self._forget_expired()
        if len(self._minted) >= MAX_OUTSTANDING:
            raise TooManySecrets
        value = PREFIX + secrets.token_urlsafe(32)
        minted = _Minted(_digest(value), owner_key, self._clock() + ttl_s)
        self._minted[minted.digest] = minted
        return value, minted.expires_at

    def redeem(self, presented: str) -> str | None:
        """Uses ``presented`` up; returns the key it stands for, or None if it is not valid."""
        if not presented.startswith(PREFIX):
            return None
        digest = _digest(presented)
        minted = self._minted.pop(digest, None)
        # The lookup is by digest (learning its timing tells nothing of the secret); the
        # comparison is made in constant time all the same.
        if minted is None or not hmac.compare_digest(minted.digest, digest):
            return None
        return minted.owner_key if self._clock() < minted.expires_at else None

    def _forget_expired(self) -> None:
        now = self._clock()
        for digest in [d for d, minted in self._minted.items() if minted.expires_at <= now]:
            del self._minted[digest]
