"""Everything a gRPC server is started with, in one frozen object the CLI fills in."""

from __future__ import annotations

from dataclasses import dataclass, field

from omni_grpc.core.limits import Limits
from omni_grpc.server.recording.settings import RecordSettings
from omni_grpc.wire.tenant_policy import TenantPolicy


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSettings:
    """Admission at capacity (docs/protocol.md, the queue): past ``capacity`` sessions, new
    ones wait for a place instead of being refused."""

    capacity: int = 0  # 0: what the engine says it serves at once; else at most that
    max_length: int = 256  # sessions waiting at most; one more is refused queue_full
    max_wait_s: float = 120.0  # the longest wait; then refused queue_wait_exceeded
    max_overtakes: int = 4  # how often a class's head may be passed over before it is due
    # The priority classes, highest first, each with its API keys; keys named nowhere are in
    # "default", which ranks last unless it is listed.
    classes: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """How to run the service: address, engine, security and limits."""

    host: str = "127.0.0.1"
    grpc_port: int = 50051  # 0 picks a free port (tests)
    # The embedded CPU speech loop, as the README promises; tests name their engine.
    engine: str = "embedded"
    # Engine-specific options, e.g. {"pace": "realtime"} for loopback.
    engine_options: dict[str, str] = field(default_factory=dict)
    # Bearer keys; empty means no authentication (local use).
    api_keys: tuple[str, ...] = ()
    # With keys set, health checks still answer without one (for load balancer and Kubernetes
    # probes); reflection, which describes the whole service, only when asked for.
    open_health: bool = True
    open_reflection: bool = False
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    limits: Limits = field(default_factory=Limits)
    # None: no queue, a session past max_sessions is refused resource_exhausted (as ever).
    queue: QueueSettings | None = None
    # How long sessions get to move elsewhere after SIGTERM before the server stops.
    shutdown_grace_s: float = 10.0
    # A connection that has not finished its TLS and HTTP/2 set-up by then is closed (a silent
    # TCP connection holds a socket and memory for nothing).
    handshake_timeout_s: float = 10.0
    # A connection with no call for this long is closed with GOAWAY (clients reconnect).
    max_connection_idle_s: float = 300.0
    # Bound on concurrent streams of every kind: Converse calls, ConverseMany's streams and
    # in-process ones together (stream_cap.py).
    max_concurrent_streams: int = 1024
    # The places (streams and calls in flight) one API key, and one peer address, may hold;
    # 0: the tenant policy's share per key (half the streams, with two keys or more), and three
    # quarters per peer.
    max_streams_per_key: int = 0
    max_streams_per_peer: int = 0
    # Proxies (addresses or networks) whose x-forwarded-for names the client a call came from,
    # for the per-address bound (omni_grpc.server.client_address); none by default.
    trusted_proxies: tuple[str, ...] = ()
    # gRPC's own bound on calls in flight, of every kind and caller; 0: four times the streams,
    # well above what keyed work holds (the bounds above keep tenants apart).
    max_concurrent_rpcs: int = 0
    # Calls without a key (health checks, and reflection when open): how many at once, and how
    # long each may last (a watch is then told to watch again).
    keyless_calls: int = 16
    keyless_call_s: float = 30.0
    # Beyond one process (docs/deploy.md): this replica's routing key, handed to clients as
    # the ``x-omni-route`` metadata so a proxy can take their resumes back here ("" : none),
    # and whether sessions are written to Redis for a peer to adopt ("off", "async", "sync").
    route: str = ""
    durability: str = "off"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Recorded sessions (``--record``, off by default): see omni_grpc/server/recording.
    recording: RecordSettings = field(default_factory=RecordSettings)

    def tenant_policy(self, capacity: int = 0) -> TenantPolicy:
        """What one API key gets from this service (omni_grpc/wire/tenant_policy.py), with
        ``capacity`` the sessions its queue serves at once (0: no queue)."""
        limits, queue = self.limits, self.queue
        return TenantPolicy.derive(
            len(self.api_keys),
            max_sessions=limits.max_sessions,
            capacity=capacity,
            sessions_per_key=limits.max_sessions_per_key,
            queue_length=queue.max_length if queue is not None else 0,
            queue_classes=queue.classes if queue is not None else (),
            max_streams=self.max_concurrent_streams,
            streams_per_key=self.max_streams_per_key,
            memory_budget_bytes=limits.memory_budget_bytes,
            memory_share=limits.key_memory_share,
            opens_per_s=limits.key_opens_per_s,
            resumes_per_s=limits.key_resumes_per_s,
            commands_per_s=limits.key_commands_per_s,
            audio_bytes_per_s=limits.key_audio_bytes_per_s,
            burst_s=limits.rate_burst_s,
        )

    def peer_share(self) -> int:
        """The places one peer address may hold, the default resolved: three quarters of the
        streams (an address is not a tenant: a key's share is the tenant policy's)."""
        streams = self.max_concurrent_streams
        return self.max_streams_per_peer or streams - streams // 4

    def rpc_limit(self) -> int:
        """gRPC's bound on calls in flight, the default resolved."""
        return self.max_concurrent_rpcs or 4 * self.max_concurrent_streams
