"""What one API key gets: every share and bound of a tenant, in one frozen value.

No key may take the service from the others (docs/security.md, Tenants). What that means in
numbers is said here and nowhere else: the service derives one :class:`TenantPolicy` from its
settings when it starts (:meth:`TenantPolicy.derive`, through ``ServerSettings.tenant_policy``),
a bridge one from its options (``BridgeOptions.tenant_policy``; under ``serve`` its options
carry the service's memory budget and share), and each registry that enforces a bound reads its
number from that value. The registries own the mechanism, the policy the numbers and the rule
each is derived by:

* live sessions (``sessions``), opens and resumes a second (``opens_per_s``,
  ``resumes_per_s``): ``core/key_shares.py``;
* commands and input bytes a second (``commands_per_s``, ``audio_bytes_per_s``):
  ``core/rate_limits.py`` (``KeyAllowances``); every bucket holds ``burst_s`` of its rate;
* pending input and the frames in flight at a bridge (``memory_bytes``): ``core/key_shares.py``
  (the ledger admission checks), ``bridge/frame_budget.py``;
* places, streams and calls in flight (``streams``): ``server/stream_cap.py``;
* waits in the queue (``queue_waits``) and the priority class (``queue_classes``):
  ``core/session_queue.py``;
* a share of each pass of a bridge's loop (``loop_slice_s``): ``bridge/loop_shares.py``;
* client secrets waiting, and minted a second (``client_secrets``, ``mints_per_s``,
  ``mint_burst_s``): ``bridge/client_secrets.py``.

Shares (sessions, streams, waits, memory) hold between two keys or more: a server with one key,
or none, has one tenant, bounded only by the server's own limits. A bound chosen in the settings
(``max_sessions_per_key``, ``max_streams_per_key``) holds with any number of keys. The rates
hold for every configured key. A bridge alone enforces only the bridge's part (frames, loop,
secrets); its policy states the rest as the defaults, which are the service's business.

The defaults of the settings that exist only as a key's (its memory share, rates, secrets and
loop slice) are the constants below; ``Limits`` and ``BridgeOptions`` default to them. The
policy is part of the vocabulary, not of the core, because the bridge reads it too and imports
only the vocabulary and the client package (``.importlinter``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The class of a key the queue's classes do not name (it ranks last unless it is listed).
DEFAULT_CLASS = "default"
# The share of the memory budget one key's sessions (and its frames in flight) may hold.
MEMORY_SHARE = 0.5
# Sessions a key opens, and resumes it makes, a second.
OPENS_PER_S = 50.0
RESUMES_PER_S = 50.0
# Commands and input bytes a second, across all of a key's sessions. A key's audio is about a
# quarter of what one core parses as base64 JSON (15 MiB frames take ~150 ms each on a loaded
# 2-core machine), so one key's flood leaves the rest.
COMMANDS_PER_S = 5000.0
AUDIO_BYTES_PER_S = 16 * 1024 * 1024
# Seconds of its rate every bucket holds (a session's too: ``Limits.rate_burst_s``).
BURST_S = 2.0
# Client secrets of a key waiting to be used, and minted a second (a bucket of MINT_BURST_S).
CLIENT_SECRETS = 1000
MINTS_PER_S = 20.0
MINT_BURST_S = 2.0
# How much of one pass of a bridge's event loop the commands of one key may take (measured:
# bridge/loop_shares.py).
LOOP_SLICE_S = 0.001


def share_of(room: int, keys: int) -> int:
    """What one key of ``keys`` may hold of ``room`` places: three quarters, rounded up, so
    that another key always finds some (0: one key or none, which has no share of its own)."""
    if keys < 2:
        return 0
    return max(1, room - room // 4)


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantPolicy:
    """What one API key gets (see the module); 0 or None: no share of its own."""

    sessions: int = 0  # live sessions
    streams: int = 0  # places: streams, and every other call in flight
    queue_waits: int = 0  # waits with a stream in the queue (four times as many in all)
    # The queue's classes, highest first, each with its keys (repr=False: they are keys).
    queue_classes: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), repr=False)
    opens_per_s: float = OPENS_PER_S
    resumes_per_s: float = RESUMES_PER_S
    commands_per_s: float = COMMANDS_PER_S
    audio_bytes_per_s: float = AUDIO_BYTES_PER_S
    burst_s: float = BURST_S  # of every bucket above
    memory_bytes: int | None = None  # input held and frames in flight; None: no share
    loop_slice_s: float = LOOP_SLICE_S
    client_secrets: int = CLIENT_SECRETS
    mints_per_s: float = MINTS_PER_S
    mint_burst_s: float = MINT_BURST_S

    @classmethod
    def derive(
        cls,
        keys: int,
        *,
        max_sessions: int = 0,
        capacity: int = 0,
        sessions_per_key: int = 0,
        queue_length: int = 0,
        queue_classes: tuple[tuple[str, tuple[str, ...]], ...] = (),
        max_streams: int = 0,
        streams_per_key: int = 0,
        memory_budget_bytes: int = 0,
        memory_share: float = MEMORY_SHARE,
        opens_per_s: float = OPENS_PER_S,
        resumes_per_s: float = RESUMES_PER_S,
        commands_per_s: float = COMMANDS_PER_S,
        audio_bytes_per_s: float = AUDIO_BYTES_PER_S,
        burst_s: float = BURST_S,
        client_secrets: int = CLIENT_SECRETS,
        mints_per_s: float = MINTS_PER_S,
    ) -> TenantPolicy:
        """The policy of a process with ``keys`` API keys, from its settings.

        * ``sessions``: ``sessions_per_key`` when chosen, else three quarters of the sessions
          served at once: a queue's ``capacity`` (never past ``max_sessions``), or without a
          queue (0) ``max_sessions``;
        * ``streams``: ``streams_per_key`` when chosen, else half of ``max_streams``;
        * ``queue_waits``: three quarters of ``queue_length`` (0: no queue, or no room in it);
        * ``memory_bytes``: ``memory_share`` of ``memory_budget_bytes``;
        * the rates and the secrets as given; the loop slice is ``LOOP_SLICE_S``.
        """
        served = min(capacity, max_sessions) if capacity > 0 else max_sessions
        shared = keys > 1
        return cls(
            sessions=sessions_per_key or (share_of(served, keys) if served else 0),
            streams=streams_per_key or (max_streams // 2 if shared else 0),
            queue_waits=share_of(queue_length, keys) if queue_length else 0,
            queue_classes=queue_classes,
            opens_per_s=opens_per_s,
            resumes_per_s=resumes_per_s,
            commands_per_s=commands_per_s,
            audio_bytes_per_s=audio_bytes_per_s,
            burst_s=burst_s,
            memory_bytes=int(memory_budget_bytes * memory_share) if shared else None,
            client_secrets=client_secrets,
            mints_per_s=mints_per_s,
        )

    def key_classes(self) -> dict[str, str]:
        """The queue class of every key a class names (the others are in ``DEFAULT_CLASS``)."""
        return {key: name for name, keys in self.queue_classes for key in keys}


__all__ = [
    "AUDIO_BYTES_PER_S",
    "BURST_S",
    "CLIENT_SECRETS",
    "COMMANDS_PER_S",
    "DEFAULT_CLASS",
    "LOOP_SLICE_S",
    "MEMORY_SHARE",
    "MINTS_PER_S",
    "MINT_BURST_S",
    "OPENS_PER_S",
    "RESUMES_PER_S",
    "TenantPolicy",
    "share_of",
]
