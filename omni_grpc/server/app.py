"""Building, running and draining the service.

:func:`start_server` wires everything for one process: the engine, the session registry, the
Converse servicer, health and reflection, optional API keys and TLS, the expiry timer and (when
asked and available) the websocket bridge. :func:`serve` runs it until SIGTERM or SIGINT and
then drains: every attached session is told ``going_away`` with the time left, new sessions are
refused, and the server stops once sessions have moved or the grace period is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import _async as health_aio  # the aio servicer; health.aio re-exports it
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from omni_grpc.core import Registry, State
from omni_grpc.engine import create_engine
from omni_grpc.engine.base import Engine
from omni_grpc.server.auth import ApiKeyInterceptor
from omni_grpc.server.servicer import SERVICE, DuplexServicer
from omni_grpc.server.settings import ServerSettings
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

MAX_TIMER_SLEEP_S = 0.5  # the expiry timer also wakes this often, so new deadlines are seen


def grpc_options(settings: ServerSettings) -> list[tuple[str, Any]]:
    """Channel options chosen on purpose: message caps, keepalive, and concurrency."""
    return [
        # A little above the core's own cap, so an oversize command gets a typed in-band error
        # (event_too_large) and the stream survives, instead of a transport-level kill.
        ("grpc.max_receive_message_length", settings.limits.max_message_bytes + 1024 * 1024),
        ("grpc.max_send_message_length", 4 * 1024 * 1024),
        # Notice dead peers within ~30 s even when a session is quiet, and let clients ping.
        ("grpc.keepalive_time_ms", 20_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.so_reuseport", 0),
    ]


@dataclass
class RunningServer:
    """A started service; ``stop`` drains and ends it."""

    settings: ServerSettings
    server: grpc.aio.Server
    servicer: DuplexServicer
    engine: Engine
    health: health_aio.HealthServicer
    grpc_port: int
    http_port: int | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _bridge: Any = None

    @property
    def registry(self) -> Registry:
        return self.servicer.registry

    @property
    def target(self) -> str:
        return f"{self.settings.host}:{self.grpc_port}"

    async def drain(self, grace_s: float) -> None:
        """Tells every attached session to go, and waits (≤ grace) for them to detach."""
        self.registry.accepting = False
        await self.health.enter_graceful_shutdown()
        for host in list(self.servicer.hosts.values()):
            host.deliver(host.session.going_away(grace_s, "shutdown"))
        deadline = time.monotonic() + grace_s
        released = self.servicer.stream_released
        while any(host.session.state is State.ATTACHED for host in self.servicer.hosts.values()):
            released.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), remaining)

    async def stop(self, grace_s: float = 0.0) -> None:
        """Drains for up to ``grace_s``, then stops everything."""
        if grace_s > 0:
            await self.drain(grace_s)
        for task in self._tasks:
            task.cancel()
        if self._bridge is not None:
            await self._bridge.cleanup()
        await self.server.stop(0)
        for host in list(self.servicer.hosts.values()):
            await host.abandon()
        await self.engine.stop()


async def _expiry_timer(servicer: DuplexServicer) -> None:
    registry = servicer.registry
    while True:
        now = time.monotonic()
        for session, effects in registry.tick(now):
            host = servicer.hosts.get(session.id)
            if host is not None:
                host.deliver(effects)
            logger.info("session %s expired", session.id)
        deadline = registry.next_deadline()
        delay = MAX_TIMER_SLEEP_S if deadline is None else deadline - time.monotonic()
        await asyncio.sleep(min(max(delay, 0.005), MAX_TIMER_SLEEP_S))


def _credentials(settings: ServerSettings) -> grpc.ServerCredentials | None:
    if not settings.tls_cert_file:
        return None
    if not settings.tls_key_file:
        raise ValueError("--tls-cert needs --tls-key")
    with open(settings.tls_key_file, "rb") as key, open(settings.tls_cert_file, "rb") as cert:
        return grpc.ssl_server_credentials([(key.read(), cert.read())])


async def start_server(settings: ServerSettings) -> RunningServer:
    """Starts the gRPC service (and the bridge when ``http_port`` is set); returns at once."""
    engine = create_engine(settings.engine, dict(settings.engine_options))
    await engine.start()
    registry = Registry(settings.limits, engine.features)
    servicer = DuplexServicer(registry, engine)
    interceptors = [ApiKeyInterceptor(settings.api_keys)] if settings.api_keys else []
    server = grpc.aio.server(
        interceptors=interceptors,
        options=grpc_options(settings),
        maximum_concurrent_rpcs=settings.max_concurrent_streams,
    )
    server.add_generic_rpc_handlers((servicer.handler(),))
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
    for name in ("", SERVICE):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    running = RunningServer(
        settings=settings,
        server=server,
        servicer=servicer,
        engine=engine,
        health=health_servicer,
        grpc_port=port,
    )
    running._tasks.append(asyncio.create_task(_expiry_timer(servicer)))
    if settings.http_port is not None:
        await _start_bridge(running)
    logger.info("gRPC listening on %s:%d (engine %s)", settings.host, port, settings.engine)
    return running


async def _start_bridge(running: RunningServer) -> None:
    try:
        from bridge.app import start_bridge
    except ImportError:
        logger.warning("the websocket bridge is not available in this build; gRPC only")
        return
    settings = running.settings
    running._bridge, running.http_port = await start_bridge(
        grpc_target=f"127.0.0.1:{running.grpc_port}",
        host=settings.host,
        port=settings.http_port or 0,
        api_keys=settings.api_keys,
        tls_cert_file=settings.tls_cert_file,
        tls_key_file=settings.tls_key_file,
    )
    logger.info("websocket bridge on %s:%s", settings.host, running.http_port)


async def serve(settings: ServerSettings) -> None:
    """Runs the service until SIGTERM/SIGINT, then drains for ``shutdown_grace_s``."""
    running = await start_server(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(
        f"omni-grpc serving gRPC on {running.target}"
        + (
            f", websocket bridge on http://{settings.host}:{running.http_port}/"
            if running.http_port
            else ""
        ),
        flush=True,
    )
    await stop.wait()
    logger.info("shutting down: draining for up to %.1f s", settings.shutdown_grace_s)
    await running.stop(settings.shutdown_grace_s)


__all__ = ["RunningServer", "pb", "serve", "start_server"]
