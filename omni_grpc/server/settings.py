"""Everything a gRPC server is started with, in one frozen object the CLI fills in."""

from __future__ import annotations

from dataclasses import dataclass, field

from omni_grpc.core.limits import Limits
from omni_grpc.server.recording.settings import RecordSettings


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
    # in-process ones together (stream_cap.py); also gRPC's maximum_concurrent_rpcs.
    max_concurrent_streams: int = 1024
    # Beyond one process (docs/deploy.md): this replica's routing key, handed to clients as
    # the ``x-omni-route`` metadata so a proxy can take their resumes back here ("" : none),
    # and whether sessions are written to Redis for a peer to adopt ("off", "async", "sync").
    route: str = ""
    durability: str = "off"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Recorded sessions (``--record``, off by default): see omni_grpc/server/recording.
    recording: RecordSettings = field(default_factory=RecordSettings)
