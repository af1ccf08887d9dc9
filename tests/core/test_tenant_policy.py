"""The tenant policy (omni_grpc/wire/tenant_policy.py): each share and bound one API key gets,
derived from the settings as docs/security.md (Tenants) says."""

from __future__ import annotations

import pytest

from omni_grpc.core import Limits
from omni_grpc.wire.tenant_policy import (
    AUDIO_BYTES_PER_S,
    BURST_S,
    COMMANDS_PER_S,
    DEFAULT_CLASS,
    LOOP_SLICE_S,
    MEMORY_SHARE,
    OPENS_PER_S,
    RESUMES_PER_S,
    TenantPolicy,
    share_of,
)


@pytest.mark.parametrize(
    ("room", "keys", "share"),
    [(64, 2, 48), (8, 3, 6), (3, 2, 3), (1, 2, 1), (64, 1, 0), (64, 0, 0)],
)
def test_a_share_is_three_quarters_rounded_up_between_two_keys_or_more(
    room: int, keys: int, share: int
) -> None:
    assert share_of(room, keys) == share


@pytest.mark.parametrize(
    ("max_sessions", "keys", "sessions"),
    [(64, 2, 48), (8, 3, 6), (3, 2, 3), (64, 1, 0), (64, 0, 0)],
)
def test_a_key_shares_three_quarters_of_the_sessions_between_two_keys_or_more(
    max_sessions: int, keys: int, sessions: int
) -> None:
    assert TenantPolicy.derive(keys, max_sessions=max_sessions).sessions == sessions


def test_a_chosen_share_of_sessions_holds_with_any_number_of_keys() -> None:
    assert TenantPolicy.derive(1, max_sessions=64, sessions_per_key=5).sessions == 5
    assert TenantPolicy.derive(3, max_sessions=64, sessions_per_key=5).sessions == 5


def test_the_share_of_sessions_comes_from_what_the_server_serves_at_once() -> None:
    # With a queue, the share is of its capacity (--capacity), not of --max-sessions (issue 34).
    assert TenantPolicy.derive(2, max_sessions=100).sessions == 75  # no queue: max_sessions
    assert TenantPolicy.derive(2, max_sessions=100, capacity=8).sessions == 6
    assert TenantPolicy.derive(2, max_sessions=100, capacity=400).sessions == 75  # never past
    assert TenantPolicy.derive(1, max_sessions=100, capacity=8).sessions == 0  # one tenant


def test_a_key_holds_half_the_streams_unless_a_share_is_chosen() -> None:
    assert TenantPolicy.derive(2, max_streams=1024).streams == 512
    assert TenantPolicy.derive(1, max_streams=1024).streams == 0  # one tenant
    assert TenantPolicy.derive(1, max_streams=1024, streams_per_key=10).streams == 10


def test_a_key_waits_in_three_quarters_of_the_queue_in_the_class_named_for_it() -> None:
    classes = (("gold", ("key-g",)), ("silver", ("key-s", "key-t")))
    policy = TenantPolicy.derive(3, queue_length=256, queue_classes=classes)
    assert policy.queue_waits == 192
    assert policy.key_classes() == {"key-g": "gold", "key-s": "silver", "key-t": "silver"}
    assert policy.key_classes().get("key-other", DEFAULT_CLASS) == DEFAULT_CLASS
    assert TenantPolicy.derive(3, queue_length=0).queue_waits == 0  # a queue without room
    assert TenantPolicy.derive(3).queue_waits == 0  # no queue
    assert TenantPolicy.derive(1, queue_length=256).queue_waits == 0  # one tenant
    assert "key-g" not in repr(policy)  # the keys are not said where the policy is


def test_a_key_holds_its_share_of_the_memory_budget_between_two_keys_or_more() -> None:
    policy = TenantPolicy.derive(2, memory_budget_bytes=1000, memory_share=0.25)
    assert policy.memory_bytes == 250
    assert TenantPolicy.derive(2, memory_budget_bytes=1000).memory_bytes == 1000 * MEMORY_SHARE
    assert TenantPolicy.derive(1, memory_budget_bytes=1000).memory_bytes is None


def test_the_rates_and_secrets_are_as_set() -> None:
    policy = TenantPolicy.derive(
        2,
        opens_per_s=1.0,
        resumes_per_s=2.0,
        commands_per_s=3.0,
        audio_bytes_per_s=4.0,
        burst_s=5.0,
        client_secrets=6,
        mints_per_s=7.0,
    )
    assert (policy.opens_per_s, policy.resumes_per_s, policy.burst_s) == (1.0, 2.0, 5.0)
    assert (policy.commands_per_s, policy.audio_bytes_per_s) == (3.0, 4.0)
    assert (policy.client_secrets, policy.mints_per_s) == (6, 7.0)
    assert policy.loop_slice_s == LOOP_SLICE_S


def test_the_service_settings_default_to_the_policys_numbers() -> None:
    limits = Limits()
    assert (limits.key_opens_per_s, limits.key_resumes_per_s) == (OPENS_PER_S, RESUMES_PER_S)
    assert (limits.key_commands_per_s, limits.key_audio_bytes_per_s) == (
        COMMANDS_PER_S,
        AUDIO_BYTES_PER_S,
    )
    assert (limits.key_memory_share, limits.rate_burst_s) == (MEMORY_SHARE, BURST_S)
    # Nothing chosen: one tenant, no shares, the default rates.
    assert TenantPolicy.derive(0) == TenantPolicy()
