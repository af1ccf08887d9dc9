"""Fair shares per API key: sessions, memory, and the buckets of opens and resumes."""

from __future__ import annotations

from typing import Any

import pytest

from omni_grpc.core import Limits
from omni_grpc.core.budget import MemoryBudget
from omni_grpc.core.errors import StreamRefused
from omni_grpc.core.key_shares import KeyShares
from omni_grpc.core.rate_limits import MIN_RETRY_AFTER_S
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT
from omni_grpc.wire.tenant_policy import TenantPolicy

from .helpers import append, close, decode, open_session, requests

KEYS = ("key-a", "key-b")
CANONICAL = pb.SessionConfig(input_audio_format=CANONICAL_INPUT)


def key_shares(keys: tuple[str, ...] = KEYS, **policy: Any) -> KeyShares:
    """The shares of ``keys`` under a tenant policy of ``policy`` (its derivation from the
    settings is tests/core/test_tenant_policy.py's)."""
    return KeyShares(keys, TenantPolicy(**policy), 0.0, Limits().open_retry_after_s)


def refusal(call: object, *args: object) -> StreamRefused:
    with pytest.raises(StreamRefused) as refused:
        call(*args)  # type: ignore[operator]
    return refused.value


def test_a_key_past_its_share_is_refused_retryably_and_the_other_key_is_not() -> None:
    shares = key_shares(sessions=6)
    shares.admit_open("key-a", held=5, now=0.0)
    refused = refusal(shares.admit_open, "key-a", 6, 0.0)
    assert (refused.code, refused.retryable, refused.retry_after_s) == (
        "resource_exhausted",
        True,
        Limits().open_retry_after_s,
    )
    assert "limit=6" in refused.message
    shares.admit_open("key-b", held=0, now=0.0)


def test_opens_past_the_bucket_are_refused_for_rate_and_take_nothing() -> None:
    shares = key_shares(opens_per_s=10.0, burst_s=1.0)
    for _ in range(10):
        shares.admit_open("key-a", held=0, now=0.0)
    refused = refusal(shares.admit_open, "key-a", 0, 0.0)
    assert (refused.code, refused.retryable) == ("rate_limit_exceeded", True)
    assert refused.retry_after_s == pytest.approx(0.1)
    refusal(shares.admit_open, "key-a", 0, 0.05)  # refused, and took nothing: still 0.05 s
    shares.admit_open("key-a", held=0, now=0.1)
    shares.admit_open("key-b", held=0, now=0.0)  # the other key's bucket is its own


def test_resumes_have_their_own_bucket_with_the_shortest_hint() -> None:
    shares = key_shares(resumes_per_s=1000.0, burst_s=0.001)
    shares.admit_resume("key-a", now=0.0)
    refused = refusal(shares.admit_resume, "key-a", 0.0)
    assert refused.retry_after_s == MIN_RETRY_AFTER_S
    shares.admit_open("key-a", held=0, now=0.0)  # opens are counted apart


def test_keys_the_server_does_not_have_and_a_keyless_server_are_not_bounded() -> None:
    shares = key_shares((), opens_per_s=1.0, burst_s=1.0)
    for _ in range(10):
        shares.admit_open("", held=100, now=0.0)
        shares.admit_resume("", now=0.0)
    assert shares.budget("") is None and shares.digest("") is None


def test_each_of_two_keys_holds_its_share_of_the_memory_budget() -> None:
    shares = key_shares(memory_bytes=250)
    budget = shares.budget("key-a")
    assert budget is not None and budget.capacity_bytes == 250
    assert shares.budget("key-b") is not budget
    assert key_shares(KEYS[:1]).budget("key-a") is None  # one key: no share


def test_input_past_the_key_share_is_refused_and_given_back_to_the_key() -> None:
    limits = Limits(max_pending_input_bytes=16, memory_budget_bytes=100)
    opened = open_session(limits=limits, config=CANONICAL)
    key = MemoryBudget(10)
    opened.session.admission.hold_for_key(key)
    assert requests(opened.session.receive(1, append(1, b"\0" * 8), now=0.0))
    assert (key.held, opened.registry.budget.held) == (8, 8)
    refused = decode(opened.session.receive(1, append(2, b"\0" * 4), now=0.0))[0].error
    assert (refused.code, refused.retryable) == ("input_backpressure", True)
    assert refused.retry_after.ToMilliseconds() == 1000
    assert "API key" in refused.message
    opened.session.receive(1, close(3), now=0.0)
    assert (key.held, opened.registry.budget.held) == (0, 0)


def test_a_session_charged_to_a_key_later_moves_what_it_holds() -> None:
    opened = open_session(config=CANONICAL)
    opened.session.receive(1, append(1, b"\0" * 6), now=0.0)
    first, second = MemoryBudget(100), MemoryBudget(100)
    opened.session.admission.hold_for_key(first)
    opened.session.admission.hold_for_key(second)
    assert (first.held, second.held) == (0, 6)
    opened.session.admission.hold_for_key(None)
    assert second.held == 0


def test_the_share_is_a_question_a_queue_can_ask_apart_from_the_bucket() -> None:
    shares = key_shares(sessions=6)
    assert not shares.over_share("key-a", 5) and shares.over_share("key-a", 6)
    assert not shares.over_share("unknown", 100)  # not a key of the server's
    assert not key_shares(KEYS[:1]).over_share("key-a", 100)  # one key: no share
    shares.take_open("key-a", now=0.0)  # the bucket alone, as a queue's door would take it
