"""Who may reach a session: the API key that opened it, and its resume token.

A session is bound to the API key that opened it (:class:`SessionLock`): a resume, a takeover
or a lookup must present that key and the session's token. The lock keeps a SHA-256 digest of
the key, never the key, and checks key and token both, every time, in constant time, so a
refusal does not tell which of the two was wrong. An id that names no session is refused after
the same work against a decoy lock (:meth:`SessionLock.decoy`), so timing does not tell which
ids exist either.

The rest of this module is about resume tokens, the secret that lets a new stream take a
session over.

A token is 256 random bits. The session keeps only its SHA-256 digest and compares digests in
constant time, so neither a memory dump nor a timing probe yields a usable token, and no
``repr`` or log line can leak one. Each successful resume rotates the token.

Rotation has one hazard: the new token travels in ``session_resumed``, and if that message never
reaches the client the client still holds only the old, now revoked token. So when an activation
fails, the token the client presented is kept as a *recovery* digest, good for one more resume,
and only while no stream is attached. The rotated token stays valid too, in case it did arrive.
An activation counts as failed until the client speaks on the resumed stream: only then is it
sure to hold the rotated token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

TOKEN_BYTES = 32  # 256 bits
_NONE = b"\0" * 32  # compared against when a digest is absent, so timing stays the same


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


class ResumeCredential:
    """The resume secret of one session, stored as digests only."""

    __slots__ = ("_current", "_recovery", "_presented")

    def __init__(self) -> None:
        self._current = b""
        self._recovery: bytes | None = None
        self._presented: bytes | None = None

    def __repr__(self) -> str:
        return "ResumeCredential(<redacted>)"

    def issue(self) -> str:
        """Makes a new token, revoking the current one, and returns its plaintext once."""
        token = secrets.token_urlsafe(TOKEN_BYTES)
        self._current = _digest(token)
        return token

    def matches(self, token: str) -> bool:
        """Says whether ``token`` is the current one, with no side effect (for lookups)."""
        return hmac.compare_digest(_digest(token), self._current)

    def sealed(self) -> tuple[bytes, bytes]:
        """The digests a store keeps: the current one, and the one a resume may still bring
        (the recovery digest, or the presented one of an activation not yet confirmed)."""
        return self._current, self._recovery or self._presented or b""

    def unseal(self, current: bytes, recovery: bytes) -> None:
        """Takes the digests of :meth:`sealed` back (a session adopted from a store)."""
        self._current = current
        self._recovery = recovery or None
        self._presented = None

    def carry(self, other: ResumeCredential) -> None:
        """Takes ``other``'s current token as the presented one of an activation not yet
        confirmed (a session opening after its wait: the wait's token works once more if the
        stream goes before the client speaks)."""
        self._presented = other._current

    def check(self, token: str, *, attached: bool) -> bool:
        """Says whether ``token`` may resume now; changes nothing (see :meth:`accept`).

        Two tokens can be good: the current one, and the recovery one while nothing is
        attached. A token is never good twice at once, so of two resumes racing with the same
        token exactly one wins.
        """
        presented = _digest(token)
        # Compare against both digests every time so timing does not tell which matched.
        current_ok = hmac.compare_digest(presented, self._current)
        recovery_ok = hmac.compare_digest(presented, self._recovery or _NONE)
        return current_ok or (recovery_ok and self._recovery is not None and not attached)

    def accept(self, token: str) -> None:
        """The resume with ``token`` goes ahead: it is what a rollback would restore.

        An older recovery digest is spent: the client has shown it holds ``token``, and what a
        store seals from now on (:meth:`sealed`) must be the token it holds, or a peer adopting
        the session after this activation failed would refuse the client's only token.
        """
        self._presented = _digest(token)
        self._recovery = None

    def confirm(self) -> None:
        """The rotated token reached the client: the recovery digest is spent."""
        self._recovery = None
        self._presented = None

    def roll_back(self) -> None:
        """The rotated token may not have arrived: the presented one works once more."""
        self._recovery = self._presented
        self._presented = None


class SessionLock:
    """The API key digest and the resume credential of one session, checked together."""

    __slots__ = ("_owner", "resume")

    def __init__(self, key: str) -> None:
        self._owner = _digest(key)  # of the key that opened the session ("" when keys are off)
        self.resume = ResumeCredential()

    def __repr__(self) -> str:
        return "SessionLock(<redacted>)"

    @classmethod
    def decoy(cls) -> SessionLock:
        """A lock no caller opens: tried in place of an unknown session's, for equal timing.

        Its owner digest is random bytes, which no key hashes to, and it holds an issued token
        of its own, so checking it costs what checking a real session's lock costs.
        """
        lock = cls("")
        lock._owner = secrets.token_bytes(len(lock._owner))
        lock.resume.issue()
        return lock

    @property
    def owner_digest(self) -> bytes:
        """The digest of the key that opened the session (what a store keeps)."""
        return self._owner

    @classmethod
    def unseal(cls, owner_digest: bytes, current: bytes, recovery: bytes) -> SessionLock:
        """A lock rebuilt from stored digests (a session adopted from a store)."""
        lock = cls("")
        lock._owner = owner_digest
        lock.resume.unseal(current, recovery)
        return lock

    def opens(self, key: str, token: str, *, attached: bool) -> bool:
        """Says whether ``key`` and ``token`` may resume the session now (see ``check``)."""
        owner_ok = hmac.compare_digest(_digest(key), self._owner)
        token_ok = self.resume.check(token, attached=attached)  # checked even for a wrong key
        return owner_ok and token_ok

    def reads(self, key: str, token: str) -> bool:
        """Says whether ``key`` and the current ``token`` may read the session (a lookup)."""
        owner_ok = hmac.compare_digest(_digest(key), self._owner)
        token_ok = self.resume.matches(token)
        return owner_ok and token_ok
