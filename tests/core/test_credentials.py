"""Resume tokens: 256 bits, digests only, rotation, and the one-shot recovery."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

import pytest

from omni_grpc.core import Status, StreamRefused
from omni_grpc.core.credentials import ResumeCredential, SessionLock
from omni_grpc.wire import pb

from .helpers import decode, heartbeat, open_session, resume, token_of

TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")


def test_token_is_256_random_bits_in_43_url_safe_characters() -> None:
    tokens = {ResumeCredential().issue() for _ in range(200)}
    assert len(tokens) == 200
    for token in tokens:
        assert TOKEN_SHAPE.fullmatch(token)
        assert len(base64.urlsafe_b64decode(token + "=")) == 32


def test_only_the_sha256_digest_is_kept() -> None:
    credential = ResumeCredential()
    token = credential.issue()
    held = [getattr(credential, name) for name in ResumeCredential.__slots__]
    assert hashlib.sha256(token.encode()).digest() in held
    for value in held:
        assert token not in repr(value)
        assert token.encode() not in (value if isinstance(value, bytes) else b"")


def test_no_repr_or_str_leaks_a_token() -> None:
    opened = open_session()
    credential = ResumeCredential()
    token = credential.issue()
    assert repr(credential) == str(credential) == "ResumeCredential(<redacted>)"
    assert token not in repr(credential)
    s = opened.session
    surfaces = [repr(s), str(s), repr(vars(s)), repr(opened.registry), repr(list(opened.registry))]
    for surface in surfaces:
        assert opened.token not in surface


def test_every_comparison_is_constant_time_on_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    # The credential module looks compare_digest up on the hmac module at each call.
    monkeypatch.setattr(hmac, "compare_digest", spy)
    credential = ResumeCredential()
    token = credential.issue()
    assert credential.matches(token)
    assert not credential.check("wrong", attached=False)
    assert credential.check(token, attached=False)
    assert len(seen) == 5  # matches: 1; each check: current and recovery, always both
    assert all(len(a) == len(b) == 32 for a, b in seen)
    assert all(token.encode() not in a + b for a, b in seen)


@pytest.mark.parametrize("wrong", ["", "x", "A" * 43, "é" * 43, "\udcff"])
def test_wrong_tokens_do_not_match(wrong: str) -> None:
    credential = ResumeCredential()
    credential.issue()
    assert not credential.matches(wrong)
    assert not credential.check(wrong, attached=False)


def test_an_unissued_credential_accepts_nothing() -> None:
    credential = ResumeCredential()
    assert not credential.matches("")
    assert not credential.check("", attached=False)


def test_rotation_revokes_the_old_token() -> None:
    credential = ResumeCredential()
    old = credential.issue()
    new = credential.issue()
    assert (credential.matches(old), credential.matches(new)) == (False, True)
    assert not credential.check(old, attached=False)


def test_recovery_digest_works_once_and_only_while_detached() -> None:
    credential = ResumeCredential()
    old = credential.issue()
    assert credential.check(old, attached=False)
    credential.accept(old)  # the resume goes ahead with it
    rotated = credential.issue()
    credential.roll_back()  # the rotated token may not have arrived
    assert not credential.check(old, attached=True)  # never to take over a live stream
    assert credential.check(old, attached=False)
    assert credential.check(rotated, attached=False)  # in case it did arrive
    credential.issue()
    credential.confirm()
    assert not credential.check(old, attached=False)
    assert not credential.check(rotated, attached=False)


# -- through the session ----------------------------------------------------------------


def test_resume_rotates_the_token_and_the_old_one_is_refused() -> None:
    opened = open_session()
    s = opened.session
    s.detach(1, now=1.0)
    generation, _, new = resume(s, opened.token, 0, now=2.0)
    assert new != opened.token and TOKEN_SHAPE.fullmatch(new)
    assert (s.check_token(opened.token), s.check_token(new)) == (False, True)
    s.detach(generation, now=3.0)
    with pytest.raises(StreamRefused) as refused:
        s.resume(opened.token, 0, now=4.0)
    assert (refused.value.status, refused.value.code) == (
        Status.NOT_FOUND,
        "session_resume_expired",
    )
    assert s.state.name == "DETACHED"  # a refused resume changes nothing


def test_failed_activation_leaves_the_old_token_usable_exactly_once() -> None:
    opened = open_session()
    s = opened.session
    s.detach(1, now=1.0)
    generation, effects = s.resume(opened.token, 0, now=2.0)
    undelivered = token_of(effects)
    assert generation == 2
    assert s.detach(generation, now=3.0)  # the stream died while activating
    assert s.state.name == "DETACHED"
    assert s.detached_at == 3.0
    generation, _, newest = resume(s, opened.token, 0, now=4.0)
    assert generation == 3  # the failed activation consumed a generation
    s.detach(generation, now=5.0)
    for spent in (opened.token, undelivered):
        with pytest.raises(StreamRefused, match="session_resume_expired"):
            s.resume(spent, 0, now=6.0)
    assert resume(s, newest, 0, now=7.0)[0] == 4


def test_the_rotated_token_of_a_failed_activation_also_works() -> None:
    opened = open_session()
    s = opened.session
    s.detach(1, now=1.0)
    generation, effects = s.resume(opened.token, 0, now=2.0)
    assert s.detach(generation, now=3.0)  # before the client read session_resumed
    generation, _, _ = resume(s, token_of(effects), 0, now=4.0)
    s.detach(generation, now=5.0)
    # The resume that did get through spent the recovery digest.
    with pytest.raises(StreamRefused, match="session_resume_expired"):
        s.resume(opened.token, 0, now=6.0)


@pytest.mark.parametrize("attached", [True, False])
def test_concurrent_resumes_with_one_token_have_exactly_one_winner(attached: bool) -> None:
    opened = open_session()
    s = opened.session
    if not attached:
        s.detach(1, now=1.0)
    winner, effects = s.resume(opened.token, 0, now=2.0)
    with pytest.raises(StreamRefused) as loser:
        s.resume(opened.token, 0, now=2.0)
    assert loser.value.code == "session_resume_expired"
    s.activation_delivered(winner)
    assert (winner, s.generation, s.state.name) == (2, 2, "ATTACHED")
    assert [event.WhichOneof("event") for event in decode(effects, winner)] == ["session_resumed"]


def test_recovery_token_cannot_take_over_a_live_stream() -> None:
    opened = open_session()
    s = opened.session
    s.detach(1, now=1.0)
    generation, effects = s.resume(opened.token, 0, now=2.0)
    assert s.detach(generation, now=3.0)  # before the client read session_resumed
    generation, _, _ = resume(s, token_of(effects), 0, now=4.0)  # the rotated one arrived
    assert s.state.name == "ATTACHED"
    with pytest.raises(StreamRefused, match="session_resume_expired"):
        s.resume(opened.token, 0, now=5.0)
    assert s.generation == generation


def test_reports_about_a_stale_generation_are_ignored() -> None:
    opened = open_session()
    s = opened.session
    first, effects = s.resume(opened.token, 0, now=1.0)  # takeover of generation 1
    second, _ = s.resume(token_of(effects), 0, now=2.0)  # and again, before the first settled
    assert not s.detach(first, now=3.0)  # about a generation that lost: no effect
    s.activation_delivered(first)
    assert (s.generation, s.state.name) == (second, "ATTACHED")
    assert s.detach(second, now=4.0)
    assert s.state.name == "DETACHED"
    assert not s.detach(second, now=5.0)  # a second report changes nothing
    assert s.detached_at == 4.0


def test_registry_lookup_needs_the_current_token_and_hides_which_part_was_wrong() -> None:
    opened = open_session()
    registry, s = opened.registry, opened.session
    assert registry.lookup(s.id, opened.token) is s
    s.detach(1, now=1.0)
    _, _, new = resume(s, opened.token, 0, now=2.0)
    assert registry.lookup(s.id, new) is s
    answers = []
    for session_id, token in ((s.id, opened.token), ("sess_unknown", new), (s.id, "")):
        with pytest.raises(StreamRefused) as refused:
            registry.lookup(session_id, token)
        answers.append((refused.value.status, refused.value.code, refused.value.message))
    assert (
        answers == [(Status.NOT_FOUND, "session_not_found", "unknown session or wrong token")] * 3
    )


def test_tokens_of_different_sessions_are_isolated() -> None:
    opened = open_session()
    other, effects = opened.registry.open(pb.OpenSession(), now=0.0)
    assert opened.session.check_token(token_of(effects)) is False
    assert other.check_token(opened.token) is False
    with pytest.raises(StreamRefused, match="session_resume_expired"):
        opened.registry.resume(
            pb.ResumeSession(session_id=other.id, resume_token=opened.token), now=1.0
        )


@pytest.mark.parametrize("speaks", [True, False], ids=["spoke", "silent"])
def test_the_old_token_retires_once_the_client_speaks_on_the_resumed_stream(speaks: bool) -> None:
    # Handing session_resumed to the transport proves nothing; a command on the new stream
    # proves the client read it, and so holds the rotated token.
    opened = open_session()
    s = opened.session
    s.detach(1, now=1.0)
    generation, _ = s.resume(opened.token, 0, now=2.0)
    if speaks:
        s.receive(generation, heartbeat(), now=3.0)
    s.detach(generation, now=4.0)
    if speaks:
        with pytest.raises(StreamRefused, match="session_resume_expired"):
            s.resume(opened.token, 0, now=5.0)
    else:
        assert resume(s, opened.token, 0, now=5.0)[0] == 3


def test_a_replaced_stream_speaking_does_not_confirm_the_new_one() -> None:
    opened = open_session()
    s = opened.session
    generation, _ = s.resume(opened.token, 0, now=1.0)  # a takeover of generation 1
    s.receive(1, heartbeat(), now=2.0)  # the old stream, ignored
    s.detach(generation, now=3.0)  # the new one dies before its client spoke
    assert resume(s, opened.token, 0, now=4.0)[0] == 3


def test_a_refused_resume_does_not_replace_the_token_to_recover() -> None:
    # A resume the journal refuses (cursor ahead, or a gap) never activated anything, so it
    # must not change which token the pending activation rolls back to.
    opened = open_session()
    s = opened.session
    s.detach(1, now=1.0)
    generation, effects = s.resume(opened.token, 0, now=2.0)  # presents T1, not confirmed
    with pytest.raises(StreamRefused, match="session_resume_conflict"):
        s.resume(token_of(effects), 99, now=3.0)  # T2, with an impossible cursor
    s.detach(generation, now=4.0)  # the activation of T1's resume rolls back
    assert resume(s, opened.token, 0, now=5.0)[0] == 3  # so T1 works once more


def test_a_resume_spends_the_older_recovery_so_a_store_seals_the_token_the_client_holds() -> None:
    # The fleet's case: the client read T2 but never spoke on that stream (so the server rolled
    # back to T1), then resumed with T2, and that stream died before session_resumed arrived.
    # The client holds T2 only. A peer adopting the session from what the store sealed after
    # that resume must let T2 in (and T1, which the client no longer holds, must be spent).
    opened = open_session()
    s = opened.session
    s.detach(1, now=1.0)
    generation, effects = s.resume(opened.token, 0, now=2.0)
    held = token_of(effects)  # read, never confirmed
    s.detach(generation, now=3.0)  # roll back: T1 good once more
    s.resume(held, 0, now=4.0)  # goes ahead; its stream dies before the client reads T3
    current, recovery = s.lock.resume.sealed()
    adopted = SessionLock.unseal(s.lock.owner_digest, current, recovery)
    assert adopted.opens("", held, attached=False)
    assert not adopted.opens("", opened.token, attached=False)
