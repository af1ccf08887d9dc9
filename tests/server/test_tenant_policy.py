"""The service's registries read what one API key gets from its one tenant policy
(omni_grpc/wire/tenant_policy.py): a setting of an odd number reaches each of them."""

from __future__ import annotations

from omni_grpc.core import Limits
from omni_grpc.server.settings import QueueSettings
from omni_grpc.wire.tenant_policy import share_of
from tests.serving import serving, settings

KEYS = ("key-a", "key-b", "key-c")
LIMITS = Limits(
    disconnect_grace_s=5.0,
    max_sessions_per_key=7,
    memory_budget_bytes=1000 * 1024 * 1024,
    key_memory_share=0.37,
    key_opens_per_s=11.0,
    key_resumes_per_s=13.0,
    key_commands_per_s=19.0,
    key_audio_bytes_per_s=23.0,
    rate_burst_s=3.0,
)
QUEUE = QueueSettings(capacity=4, max_length=44, classes=(("gold", ("key-a",)),))


async def test_each_registry_reads_its_number_from_the_services_policy() -> None:
    chosen = settings(api_keys=KEYS, limits=LIMITS, queue=QUEUE, max_streams_per_key=29)
    async with serving(chosen) as running:
        sessions = running.sessions
        tenants = sessions.tenants
        assert tenants == chosen.tenant_policy(capacity=4)  # derived once, from the settings
        # Sessions, opens and resumes, memory: the key shares.
        shares = sessions.key_shares
        assert "limit=7" in shares.share_refusal().message
        assert (shares._opens["key-a"].rate_per_s, shares._opens["key-a"].capacity) == (11, 33)
        assert shares._resumes["key-b"].rate_per_s == 13.0
        budget = shares.budget("key-c")
        assert budget is not None and budget.capacity_bytes == int(1000 * 1024 * 1024 * 0.37)
        # Commands and audio a second: the key's allowance.
        allowance = sessions._key_allowances.get("key-a")
        assert allowance is not None
        assert (allowance.commands.rate_per_s, allowance.audio_bytes.rate_per_s) == (19, 23)
        assert allowance.commands.capacity == 19 * 3
        # Streams and calls in flight: the cap every transport's streams take places in.
        assert running.local is not None and running.local.cap.per_key == 29
        # Waits in the queue, and the class of each key.
        assert sessions.waiting is not None
        queue = sessions.waiting.queue
        assert queue.policy.key_share == tenants.queue_waits == share_of(44, len(KEYS))
        assert (queue.class_of("key-a"), queue.class_of("key-b")) == ("gold", "default")


async def test_a_queue_shares_its_capacity_and_no_queue_shares_max_sessions() -> None:
    # issue 34: with a queue, a key's share of sessions is of the capacity, not --max-sessions.
    limits = Limits(disconnect_grace_s=5.0, max_sessions=40)
    async with serving(settings(api_keys=KEYS[:2], limits=limits, queue=QUEUE)) as running:
        assert running.sessions.tenants.sessions == 3  # three quarters of 4
    async with serving(settings(api_keys=KEYS[:2], limits=limits)) as running:
        assert running.sessions.tenants.sessions == 30  # three quarters of 40
        assert running.sessions.waiting is None
