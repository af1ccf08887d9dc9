"""A bridge's registries read what one API key gets from its tenant policy
(omni_grpc/wire/tenant_policy.py), derived from its options: a setting of an odd number reaches
each of them."""

from __future__ import annotations

import dataclasses

import pytest

from bridge.app import BRIDGE, create_app
from bridge.options import BridgeOptions
from omni_grpc.client.channel import ChannelSettings
from omni_grpc.wire.tenant_policy import LOOP_SLICE_S, TenantPolicy

OPTIONS = BridgeOptions(
    api_keys=("key-a", "key-b"),
    memory_budget_bytes=1000,
    key_memory_share=0.37,
    max_client_secrets_per_key=9,
    key_mints_per_s=3.0,
)


def test_the_policy_comes_from_the_options() -> None:
    assert OPTIONS.tenant_policy() == TenantPolicy(
        memory_bytes=370, client_secrets=9, mints_per_s=3.0, loop_slice_s=LOOP_SLICE_S
    )
    assert BridgeOptions(api_keys=("key-a",)).tenant_policy().memory_bytes is None  # one tenant


async def test_each_registry_reads_its_number_from_the_bridges_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The loop slice is no setting: an odd one comes in with the policy itself.
    derived = BridgeOptions.tenant_policy
    policy = dataclasses.replace(derived(OPTIONS), loop_slice_s=0.0123)
    monkeypatch.setattr(BridgeOptions, "tenant_policy", lambda options: policy)
    bridge = create_app(ChannelSettings(target="127.0.0.1:1"), OPTIONS)[BRIDGE]
    assert bridge.tenants is policy
    # Frames in flight: each key's share of the bridge's own budget.
    ledger = bridge.frames._key_ledger("key-b")
    assert ledger is not None and ledger.capacity_bytes == 370
    assert bridge.frames.server.capacity_bytes == 1000
    # The loop: each key's slice of a pass.
    assert bridge.loop_shares._slice_s == 0.0123
    # Client secrets: how many wait, and how fast a key mints.
    secrets = bridge.gate.client_secrets
    assert secrets is not None
    assert (secrets._per_key, secrets._mints_per_s) == (9, 3.0)
