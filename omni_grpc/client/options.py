"""The plain data around a client: its tunables, its takeover handle, its counters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from omni_grpc.client.backoff import ReconnectPolicy
from omni_grpc.wire import pb


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    """Tunables of a client; the defaults suit a client on the same network as the server."""

    reconnect: ReconnectPolicy = field(default_factory=ReconnectPolicy)
    # Opening gives up sooner: nothing is lost yet, and the caller wants a quick answer.
    open_retry: ReconnectPolicy = field(
        default_factory=lambda: ReconnectPolicy(max_attempts=3, max_elapsed_s=5.0)
    )
    ack_interval_s: float | None = None  # None: what the server advises, else 1 s
    ack_every_events: int = 64
    # Commands kept until the server confirms them (to resend after a resume); a full journal
    # makes sending wait.
    max_unconfirmed_commands: int = 1024
    max_unconfirmed_bytes: int = 32 * 1024 * 1024
    event_buffer: int = 256  # events received but not yet taken from events()
    handshake_timeout_s: float = 10.0
    seed: int | None = None  # for the backoff jitter; tests make it repeatable
    # Told each session_queued while an open waits for room on a server at capacity (its
    # position and estimated wait); None: the wait is silent.
    on_queued: Callable[[pb.SessionQueued], None] | None = None

    def __post_init__(self) -> None:
        if self.ack_every_events < 1 or self.event_buffer < 1:
            raise ValueError("ack_every_events and event_buffer must be positive")
        if self.ack_interval_s is not None and self.ack_interval_s <= 0:
            raise ValueError("ack_interval_s must be positive")
        if self.handshake_timeout_s <= 0:
            raise ValueError("handshake_timeout_s must be positive")


@dataclass(frozen=True, slots=True)
class ResumeHandle:
    """What another client needs to take a session over. Keep it secret: it holds the token."""

    session_id: str
    resume_token: str = field(repr=False)
    last_seq: int
    # The routing key of the replica holding the session (x-omni-route), "" when none: a
    # takeover that brings it goes straight there through a proxy.
    route: str = ""


@dataclass(slots=True)
class ClientStats:
    """Counters about reconnects, for logs, tests and benchmarks."""

    reconnects: int = 0
    resent_commands: int = 0
    duplicate_events: int = 0
    last_resent: tuple[int, ...] = ()  # the client_seqs the latest resume sent again
    resumed_applied: int = 0  # the applied_client_seq the latest resume reported
    replayed_events: int = 0  # the events every resume so far replayed, together
