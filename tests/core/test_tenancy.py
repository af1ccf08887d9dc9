"""Tenancy: a session belongs to the API key that opened it, and refusals tell nothing.

A resume, a takeover or a lookup with another key is refused exactly as one that names an
unknown session or brings a wrong token: the same answer, after the same digests and the same
comparisons (the work is what decides the timing, so the test counts it).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

import pytest

from omni_grpc.core import Registry, Status, StreamRefused
from omni_grpc.core.credentials import SessionLock
from omni_grpc.wire import pb

from .helpers import ENGINE, LIMITS, close, decode, kinds, token_of

OWNER, OTHER = "owner-key", "other-key"


def opened_by(key: str) -> tuple[Registry, str, str]:
    """A registry with one session opened with ``key``; its id and token."""
    registry = Registry(LIMITS, ENGINE)
    session, effects = registry.open(pb.OpenSession(), 0.0, key=key)
    return registry, session.id, token_of(effects)


def answer(call: Callable[[], object]) -> tuple[object, ...]:
    """Everything a refusal says to the client."""
    with pytest.raises(StreamRefused) as refused:
        call()
    error = refused.value
    return (error.status, error.code, error.message, error.retryable, error.retry_after_s)


def resume_request(session_id: str, token: str) -> pb.ResumeSession:
    return pb.ResumeSession(session_id=session_id, resume_token=token)


UNKNOWN_RESUME = (Status.NOT_FOUND, "session_resume_expired", "unknown or expired session")
UNKNOWN_LOOKUP = (Status.NOT_FOUND, "session_not_found", "unknown session or wrong token")


@pytest.mark.parametrize("attached", [False, True], ids=["resume", "takeover"])
def test_another_key_is_refused_like_an_unknown_session(attached: bool) -> None:
    registry, session_id, token = opened_by(OWNER)
    session = registry.lookup(session_id, token, key=OWNER)
    if not attached:
        session.detach(1, now=1.0)
    before = (session.state, session.generation)
    answers = {
        answer(lambda key=key: registry.resume(resume_request(session_id, token), 2.0, key=key))
        for key in (OTHER, "", OWNER.upper(), OWNER + " ")
    }
    unknown = answer(lambda: registry.resume(resume_request("sess_nope", token), 2.0, key=OWNER))
    wrong_token = answer(
        lambda: registry.resume(resume_request(session_id, "wrong"), 2.0, key=OWNER)
    )
    assert answers == {unknown} == {wrong_token} == {(*UNKNOWN_RESUME, False, 0.0)}
    assert (session.state, session.generation) == before  # the owner's stream is untouched
    _, generation, _ = registry.resume(resume_request(session_id, token), 3.0, key=OWNER)
    assert generation == 2


def test_an_ended_session_replays_only_to_its_key() -> None:
    registry, session_id, token = opened_by(OWNER)
    session = registry.lookup(session_id, token, key=OWNER)
    session.receive(1, close(1), now=1.0)
    registry.discard(session)
    session.detach(1, now=1.0)
    request = pb.ResumeSession(session_id=session_id, resume_token=token, last_received_seq=0)
    # The tombstone still holds the ending, but another key learns not even that it exists.
    assert answer(lambda: registry.resume(request, 2.0, key=OTHER))[:3] == UNKNOWN_RESUME
    _, _, effects = registry.resume(request, 2.0, key=OWNER)
    assert kinds(decode(effects))[-1] == "session_closed"


def test_a_lookup_with_another_key_is_refused_like_an_unknown_session() -> None:
    registry, session_id, token = opened_by(OWNER)
    assert registry.lookup(session_id, token, key=OWNER).id == session_id
    answers = {
        answer(lambda: registry.lookup(session_id, token, key=OTHER)),
        answer(lambda: registry.lookup(session_id, "wrong", key=OWNER)),
        answer(lambda: registry.lookup("sess_nope", token, key=OWNER)),
    }
    assert answers == {(*UNKNOWN_LOOKUP, False, 0.0)}


def test_sessions_opened_without_a_key_belong_to_no_key() -> None:
    registry, session_id, token = opened_by("")
    assert answer(lambda: registry.lookup(session_id, token, key=OTHER))[:3] == UNKNOWN_LOOKUP
    assert registry.lookup(session_id, token).id == session_id


class WorkCounter:
    """Counts the digests and comparisons the credentials module does, with their sizes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.work: list[tuple[str, int, int]] = []
        real_compare, real_sha256 = hmac.compare_digest, hashlib.sha256

        def compare(a: bytes, b: bytes) -> bool:
            self.work.append(("compare", len(a), len(b)))
            return real_compare(a, b)

        def sha256(data: bytes) -> hashlib._Hash:
            self.work.append(("sha256", 0, 0))  # the input is the caller's; its size is theirs
            return real_sha256(data)

        # The credentials module looks both up on their modules at each call.
        monkeypatch.setattr(hmac, "compare_digest", compare)
        monkeypatch.setattr(hashlib, "sha256", sha256)

    def of(self, call: Callable[[], object]) -> list[tuple[str, int, int]]:
        self.work.clear()
        with pytest.raises(StreamRefused):
            call()
        return list(self.work)


def test_every_refusal_does_the_same_work(monkeypatch: pytest.MonkeyPatch) -> None:
    registry, session_id, token = opened_by(OWNER)
    registry.lookup(session_id, token, key=OWNER).detach(1, now=1.0)
    counter = WorkCounter(monkeypatch)

    def resume(session_id: str, token: str, key: str) -> Callable[[], object]:
        return lambda: registry.resume(resume_request(session_id, token), 2.0, key=key)

    def lookup(session_id: str, token: str, key: str) -> Callable[[], object]:
        return lambda: registry.lookup(session_id, token, key=key)

    for probe in (resume, lookup):
        work = [
            counter.of(probe("sess_nope", token, OWNER)),
            counter.of(probe(session_id, token, OTHER)),
            counter.of(probe(session_id, "wrong", OWNER)),
            counter.of(probe(session_id, "wrong", OTHER)),
        ]
        assert work[0] and all(each == work[0] for each in work), work
        assert all(step == ("compare", 32, 32) for step in work[0] if step[0] == "compare")


def test_the_lock_keeps_a_digest_of_the_key_never_the_key() -> None:
    lock = SessionLock(OWNER)
    held = [getattr(lock, name) for name in SessionLock.__slots__]
    assert hashlib.sha256(OWNER.encode()).digest() in held
    assert all(OWNER not in repr(value) for value in held)
    assert repr(lock) == str(lock) == "SessionLock(<redacted>)"
    token = lock.resume.issue()
    assert lock.opens(OWNER, token, attached=False) and lock.reads(OWNER, token)
    assert not lock.opens(OTHER, token, attached=False) and not lock.reads(OTHER, token)


def test_the_decoy_lock_opens_for_no_key() -> None:
    decoy = SessionLock.decoy()
    assert hashlib.sha256(b"").digest() not in [getattr(decoy, n) for n in SessionLock.__slots__]
    assert not decoy.opens("", "", attached=False) and not decoy.reads("", "")
