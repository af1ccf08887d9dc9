"""Building, starting and stopping the gRPC service of one process.

:func:`start_server` wires the engine, the sessions (registry, hosts, expiry timer, all on one
injected clock), the Converse servicer, health and reflection, optional API keys and TLS.
:meth:`RunningServer.drain` is the graceful part of a stop: health says NOT_SERVING, new
sessions are refused, every attached session is told ``going_away`` with the time left, and the
drain ends once they have moved or the grace is over. Signals and the websocket bridge next to
the service are the launcher's business (``omni-grpc serve`` in :mod:`omni_cli`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import _async as health_aio  # the aio servicer; health.aio re-exports it
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.trace import TracerProvider

from omni_grpc.core import Registry
from omni_grpc.engine import create_engine
from omni_grpc.engine.base import Engine
from omni_grpc.server import metrics
from omni_grpc.server.agent import agent_reply
from omni_grpc.server.allocator import return_large_blocks
from omni_grpc.server.auth import ApiKeyInterceptor, open_services
from omni_grpc.server.client_address import client_address, trusted_networks
from omni_grpc.server.durable import DurableStore
from omni_grpc.server.local import LocalService
from omni_grpc.server.multiplex import METHOD as CONVERSE_MANY
from omni_grpc.server.multiplex import MultiplexServicer, send_limit
from omni_grpc.server.recording import Recorder
from omni_grpc.server.servicer import SERVICE, DuplexServicer
from omni_grpc.server.session_gauges import SESSION_GAUGES
from omni_grpc.server.sessions import Sessions
from omni_grpc.server.settings import ServerSettings
from omni_grpc.server.stream_cap import CappedCalls, StreamCap
from omni_grpc.server.tracing import server_tracer
from omni_grpc.server.waiting import QUEUE_GAUGES, queue_capacity, session_queue

logger = logging.getLogger(__name__)


def grpc_options(settings: ServerSettings) -> list[tuple[str, Any]]:
    """Channel options chosen on purpose: message caps, keepalive, and concurrency."""
    return [
        # A little above the core's own cap, so an oversize command gets a typed in-band error
        # (event_too_large) and the stream survives, instead of a transport-level kill.
        ("grpc.max_receive_message_length", settings.limits.max_message_bytes + 1024 * 1024),
        # As large as the largest event (a session's tools may pass 4 MiB, gRPC's default):
        # ConverseMany's batches are cut to it, so no event ends a call (multiplex.py).
        ("grpc.max_send_message_length", send_limit(settings.limits.max_message_bytes)),
        # Notice dead peers within ~30 s even when a session is quiet, and let clients ping.
        ("grpc.keepalive_time_ms", 20_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.so_reuseport", 0),
        # Close connections that never finish their set-up, and those that carry no call.
        ("grpc.server_handshake_timeout_ms", int(settings.handshake_timeout_s * 1000)),
        ("grpc.max_connection_idle_ms", int(settings.max_connection_idle_s * 1000)),
        # A call's headers: ours are a few hundred bytes (a key, a route, a resume token).
        # gRPC's own defaults, set here so that they are ours (docs/security.md, raw HTTP/2).
        ("grpc.max_metadata_size", 8 * 1024),
        ("grpc.absolute_max_metadata_size", 16 * 1024),
    ]


@dataclass
class RunningServer:
    """A started service; ``drain`` moves its sessions away, ``stop`` ends it."""

    settings: ServerSettings
    server: grpc.aio.Server
    sessions: Sessions
    engine: Engine
    health: health_aio.HealthServicer
    grpc_port: int
    store: DurableStore | None = None
    local: LocalService | None = None  # the in-process entry point (a bridge in this process)
    draining: bool = False
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def registry(self) -> Registry:
        return self.sessions.registry

    @property
    def target(self) -> str:
        return f"{self.settings.host}:{self.grpc_port}"

    async def drain(self, grace_s: float) -> None:
        """Says NOT_SERVING and gives attached sessions up to ``grace_s`` to move away."""
        self.draining = True
        await self.health.enter_graceful_shutdown()
        await self.sessions.drain(grace_s)

    async def stop(self, grace_s: float = 0.0) -> None:
        """Drains for up to ``grace_s``, then stops everything."""
        if grace_s > 0:
            await self.drain(grace_s)
        for task in self._tasks:
            task.cancel()
        await self.server.stop(0)
        await self.sessions.abandon()
        if self.sessions.recorder is not None:
            await self.sessions.recorder.stop()
        if self.store is not None:
            await self.store.stop()
        await self.engine.stop()

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """Whether a proxy should send this replica new work, and why (``GET /health``)."""
        durability = self.settings.durability
        state: dict[str, object] = {
            "status": "draining" if self.draining else "serving",
            "route": self.settings.route,
            "durability": durability,
            "durable": self.store is not None and self.store.up,
            "sessions": len(self.registry),
        }
        if (waiting := self.sessions.waiting) is not None:
            state.update(capacity=waiting.capacity, free=waiting.free(), queued=len(waiting.queue))
        return not self.draining, state

    def agent_reply(self) -> str:
        """This replica's room, as HAProxy's agent check reads it (``--agent-port``)."""
        if (waiting := self.sessions.waiting) is not None:
            capacity, free = waiting.capacity, waiting.free()
        else:
            capacity = self.settings.limits.max_sessions
            free = max(0, capacity - len(self.registry))
        return agent_reply(free, capacity, draining=self.draining)


def _credentials(settings: ServerSettings) -> grpc.ServerCredentials | None:
    if not settings.tls_cert_file:
        return None
    if not settings.tls_key_file:
        raise ValueError("--tls-cert needs --tls-key")
    with open(settings.tls_key_file, "rb") as key, open(settings.tls_cert_file, "rb") as cert:
        return grpc.ssl_server_credentials([(key.read(), cert.read())])


async def start_server(
    settings: ServerSettings,
    *,
    clock: Callable[[], float] = time.monotonic,
    tracer_provider: TracerProvider | None = None,
) -> RunningServer:
    """Starts the gRPC service and its expiry timer; returns at once.

    ``clock`` is the one clock every session deadline is measured on (tests pass a fake one
    and move it instead of sleeping). With a ``tracer_provider`` each turn is traced (see
    :mod:`omni_grpc.server.tracing`); without one, nothing is.
    """
    return_large_blocks()  # freed audio leaves the process (see allocator.py)
    metrics.register_collectors(SESSION_GAUGES)  # scrape-time counts, once per process
    engine = create_engine(settings.engine, dict(settings.engine_options))
    queue, capacity = None, 0
    if settings.queue is not None:  # checked before the engine starts (minutes, on a GPU)
        capacity = queue_capacity(settings.queue, settings.limits, engine.features.capacity)
    # What one API key gets, derived once: every registry that bounds a key reads it.
    tenants = settings.tenant_policy(capacity)
    if settings.queue is not None:
        queue = session_queue(settings.queue, settings.limits, engine.features.capacity, tenants)
        queue.route = settings.route
        metrics.register_collectors(QUEUE_GAUGES)
    await engine.start()
    store = None
    if settings.durability != "off":
        store = DurableStore(
            settings.redis_url,
            settings.route or f"{settings.host}:{settings.grpc_port}",
            settings.durability,
            record_ttl_s=settings.limits.disconnect_grace_s + settings.limits.journal_ttl_s,
            grace_s=settings.limits.disconnect_grace_s,
        )
        await store.start()
    registry = Registry(settings.limits, engine.features)
    registry.route = settings.route
    if queue is not None:
        registry.capabilities.capacity = queue.policy.capacity
        logger.info("capacity %d sessions; new ones beyond wait", queue.policy.capacity)
    registry.recording = settings.recording.policy
    recorder = None
    if settings.recording.policy != "off":
        replica = settings.route or f"{settings.host}:{settings.grpc_port}"
        options = dict(settings.engine_options)
        recorder = Recorder(settings.recording, clock, engine.features, options, replica)
        await recorder.start()
        logger.info("%s", settings.recording.describe())
    sessions = Sessions(
        registry,
        engine,
        clock,
        api_keys=settings.api_keys,
        tenants=tenants,
        tracer=server_tracer(tracer_provider),
        store=store,
        queue=queue,
        recorder=recorder,
    )
    keyless = open_services(health=settings.open_health, reflection=settings.open_reflection)
    interceptors: list[grpc.aio.ServerInterceptor] = (
        [ApiKeyInterceptor(settings.api_keys, keyless)] if settings.api_keys else []
    )
    # One bound for Converse calls, ConverseMany's streams and in-process streams together, and
    # the places of each key and peer (stream_cap.py); gRPC's own bound on calls sits well
    # above, so that calls without a key, which hold only a few places, never reach it.
    cap = StreamCap(
        settings.max_concurrent_streams, per_key=tenants.streams, per_peer=settings.peer_share()
    )

    def refused(bound: str, key: str, peer: str) -> None:
        metrics.KEY_REFUSALS.labels(sessions.key_label(key), bound).inc()
        sessions.refusals.refused("call", "", peer, bound)

    trusted = trusted_networks(settings.trusted_proxies)

    def client_of(context: grpc.aio.ServicerContext) -> str:
        metadata = tuple(context.invocation_metadata() or ())
        return client_address(context.peer(), metadata, trusted)

    capped = CappedCalls(
        cap,
        StreamCap(settings.keyless_calls),
        keys=settings.api_keys,
        open_services=open_services(health=True, reflection=True),
        keyless_call_s=settings.keyless_call_s,
        address=client_of,
        refused=refused,
    )
    interceptors.append(capped)  # after the key check: no place for a bad key
    server = grpc.aio.server(
        interceptors=interceptors,
        options=grpc_options(settings),
        maximum_concurrent_rpcs=settings.rpc_limit(),
    )
    # The in-process entry point serves a bridge in this process, and ConverseMany's streams.
    local = LocalService(sessions, api_keys=settings.api_keys, cap=cap)
    limit = send_limit(settings.limits.max_message_bytes)
    many = MultiplexServicer(sessions, local.gate, settings.route, send_limit_bytes=limit).handler()
    server.add_generic_rpc_handlers(
        (
            DuplexServicer(sessions, settings.route, cap).handler(),
            grpc.method_handlers_generic_handler(SERVICE, {CONVERSE_MANY: many}),
        )
    )
    health_servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    address = f"{settings.host}:{settings.grpc_port}"
    credentials = _credentials(settings)
    port = (
        server.add_secure_port(address, credentials)
        if credentials
        else server.add_insecure_port(address)
    )
    await server.start()
    if recorder is not None and not settings.route:
        recorder.replica = f"{settings.host}:{port}"  # the port a 0 picked
    for name in ("", SERVICE):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    running = RunningServer(
        settings=settings,
        server=server,
        sessions=sessions,
        engine=engine,
        health=health_servicer,
        grpc_port=port,
        store=store,
        local=local,
    )
    running._tasks.append(asyncio.create_task(sessions.keep_expiring()))
    logger.info("gRPC listening on %s:%d (engine %s)", settings.host, port, settings.engine)
    return running


__all__ = ["RunningServer", "grpc_options", "start_server"]
