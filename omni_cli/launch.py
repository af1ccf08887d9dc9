"""What ``omni-grpc serve`` and ``omni-grpc bridge`` run: the processes' composition and life.

``serve`` is the gRPC service with the websocket bridge next to it on the HTTP port, handing
its commands to the sessions in-process (no gRPC hop: :mod:`omni_grpc.server.local`);
``bridge`` is the bridge alone, in front of a service that runs elsewhere. Both run until
SIGTERM or SIGINT. On that signal the service drains first (sessions are told ``going_away``,
so clients of the bridge hear it too), then the bridge closes its websockets, then the service
stops. With ``--bridge-workers N`` the bridge's port is served by N processes
(:mod:`omni_cli.workers`): this one and N - 1 workers, which reach the service over gRPC.
This is the one module that imports both the server and the
bridge: the server knows nothing of the bridge.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from multiprocessing.synchronize import Event

from aiohttp import web
from opentelemetry.trace import TracerProvider

from bridge.app import start_bridge
from bridge.frame_budget import FrameBudget
from omni_cli.config import BridgeSettings, ServeSettings
from omni_cli.logs import configure_logging
from omni_cli.tracing import otlp_tracer_provider
from omni_cli.workers import BridgeWorkers, parent_gone
from omni_grpc.server.agent import start_agent
from omni_grpc.server.allocator import give_back, return_large_blocks
from omni_grpc.server.app import RunningServer, start_server
from omni_grpc.server.collector import settle_collector
from omni_grpc.server.metrics_endpoint import start_metrics_endpoint
from omni_grpc.wire.keys import use_label_secret

logger = logging.getLogger(__name__)

WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


@dataclass
class Service:
    """A started service and, when asked for, its bridge."""

    server: RunningServer
    bridge: web.AppRunner | None = None
    http_port: int | None = None
    metrics: web.AppRunner | None = None  # /metrics on a port of its own, when asked for
    metrics_port: int | None = None
    workers: BridgeWorkers | None = None  # the bridge's other processes, when asked for
    agent: asyncio.Server | None = None  # HAProxy's agent check, when asked for
    agent_port: int | None = None

    async def stop(self, grace_s: float = 0.0) -> None:
        """Drains the service for up to ``grace_s``, closes the bridge, stops the service."""
        if grace_s > 0:
            await self.server.drain(grace_s)
        if self.workers is not None:
            await self.workers.stop()
        if self.bridge is not None:
            await self.bridge.cleanup()
        await self.server.stop()
        if self.agent is not None:
            self.agent.close()  # after the drain, which it told the proxy about
        if self.metrics is not None:
            await self.metrics.cleanup()  # last, so a scrape sees the drain to its end


@asynccontextmanager
async def traces_to(endpoint: str | None) -> AsyncIterator[TracerProvider | None]:
    """The provider that exports to ``endpoint`` (None: no tracing, no provider); the spans
    it still holds are sent when the block ends."""
    if endpoint is None:
        yield None
        return
    provider = otlp_tracer_provider(endpoint, os.environ)
    logger.info("traces to %s", endpoint)
    try:
        yield provider
    finally:
        await asyncio.to_thread(provider.shutdown)  # flushes: blocking network I/O


async def start_service(
    settings: ServeSettings, *, tracer_provider: TracerProvider | None = None
) -> Service:
    """Starts the service, and the bridge on ``settings.http_port`` unless that is None; with
    ``tracer_provider`` both trace each turn."""
    running = await start_server(settings.server, tracer_provider=tracer_provider)
    service = Service(running)
    if settings.metrics_port is not None:
        try:
            service.metrics, service.metrics_port = await start_metrics_endpoint(
                settings.server.host, settings.metrics_port, running.readiness
            )
        except BaseException:
            await running.stop()
            raise
        logger.info("metrics on %s:%s/metrics", settings.server.host, service.metrics_port)
    if settings.agent_port is not None:
        try:
            service.agent, service.agent_port = await start_agent(
                settings.server.host, settings.agent_port, running.agent_reply
            )
        except BaseException:
            await service.stop()
            raise
    if settings.http_port is None:
        return service
    host = settings.server.host
    # The bridge reaches the service on loopback when it listens on every address.
    target = f"{'127.0.0.1' if host in WILDCARD_HOSTS else host}:{running.grpc_port}"
    # The service's address, keys, certificate and memory budget are the bridge's too (so its
    # tenant policy's frame share is the service's); served with the service's certificate,
    # the bridge trusts it for the gRPC hop.
    limits = settings.server.limits
    options = replace(
        settings.bridge,
        host=host,
        port=settings.http_port,
        api_keys=settings.server.api_keys,
        memory_budget_bytes=limits.memory_budget_bytes,
        key_memory_share=limits.key_memory_share,
        tls_cert_file=settings.server.tls_cert_file,
        tls_key_file=settings.server.tls_key_file,
        header_timeout_s=settings.server.handshake_timeout_s,
        reuse_port=settings.bridge_workers > 1,
    )
    try:
        sessions = running.sessions
        service.bridge, service.http_port = await start_bridge(
            target,
            options,
            tracer_provider=tracer_provider,
            local=running.local,  # the same process: no gRPC hop
            # Client frames count against the service's budget and each key's share of it.
            frames=FrameBudget(
                sessions.budget,
                sessions.key_shares.budget,
                sessions.audio_wait,
                on_drained=give_back,  # a flood's free pages go back to the system
            ),
        )
        if settings.bridge_workers > 1:
            workers = BridgeSettings(
                grpc_target=target,
                # The workers reach the service over gRPC, on a few ConverseMany calls; each
                # counts its frames against a budget of its own, the size of the service's.
                bridge=replace(options, port=service.http_port, multiplex=True),
                log_level=settings.log_level,
                log_format=settings.log_format,
                otlp_endpoint=settings.otlp_endpoint,
            )
            service.workers = BridgeWorkers.start(
                workers, settings.bridge_workers - 1, bridge_worker
            )
            await service.workers.listening()
    except BaseException:
        await service.stop()
        raise
    logger.info(
        "websocket bridge on %s:%s (%d processes)", host, service.http_port, settings.bridge_workers
    )
    return service


async def stop_signalled() -> None:
    """Returns on the first SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


async def serve(settings: ServeSettings) -> None:
    """Runs the service (and its bridge) until a signal, then drains and stops."""
    async with traces_to(settings.otlp_endpoint) as tracer_provider:
        await _serve(settings, tracer_provider)


async def _serve(settings: ServeSettings, tracer_provider: TracerProvider | None) -> None:
    service = await start_service(settings, tracer_provider=tracer_provider)
    settle_collector()  # what the service is made of is left out of later collections
    scheme = "https" if settings.server.tls_cert_file else "http"
    bridge = (
        f", websocket bridge on {scheme}://{settings.server.host}:{service.http_port}/"
        if service.http_port
        else ""
    )
    print(f"omni-grpc serving gRPC on {service.server.target}{bridge}", flush=True)
    await stop_signalled()
    grace_s = settings.server.shutdown_grace_s
    logger.info("shutting down: draining for up to %.1f s", grace_s)
    await service.stop(grace_s)


async def run_bridge(settings: BridgeSettings) -> None:
    """Runs the bridge alone, in front of ``settings.grpc_target``, until a signal."""
    async with traces_to(settings.otlp_endpoint) as tracer_provider:
        await _run_bridge(settings, tracer_provider)


async def _start_bridge_alone(
    settings: BridgeSettings, tracer_provider: TracerProvider | None, *, reuse_port: bool
) -> tuple[web.AppRunner, int]:
    options = replace(settings.bridge, reuse_port=reuse_port)
    return_large_blocks()  # a frame's copies leave the process when freed, as in the service
    return await start_bridge(
        settings.grpc_target, options, tracer_provider=tracer_provider, on_drained=give_back
    )


async def _run_bridge(settings: BridgeSettings, tracer_provider: TracerProvider | None) -> None:
    count = settings.bridge_workers
    runner, port = await _start_bridge_alone(settings, tracer_provider, reuse_port=count > 1)
    metrics: web.AppRunner | None = None
    workers: BridgeWorkers | None = None
    try:
        if count > 1:
            # The workers share the bound port; /metrics stays this process's own.
            bridge = replace(settings.bridge, port=port)
            shared = replace(settings, bridge=bridge, bridge_workers=1, metrics_port=None)
            workers = BridgeWorkers.start(shared, count - 1, bridge_worker)
            await workers.listening()
        if settings.metrics_port is not None:
            metrics, metrics_port = await start_metrics_endpoint(
                settings.bridge.host, settings.metrics_port
            )
            logger.info("metrics on %s:%s/metrics", settings.bridge.host, metrics_port)
        host, scheme = settings.bridge.host, "https" if settings.bridge.tls_cert_file else "http"
        print(
            f"omni-grpc bridge on {scheme}://{host}:{port}/ for {settings.grpc_target}",
            flush=True,
        )
        await stop_signalled()
    finally:
        if workers is not None:
            await workers.stop()
        await runner.cleanup()
        if metrics is not None:
            await metrics.cleanup()


def bridge_worker(settings: BridgeSettings, parent_pid: int, listening: Event) -> None:
    """A worker process's life (:class:`~omni_cli.workers.BridgeWorkers` starts it): the
    bridge on the shared port until SIGTERM or its parent goes; ``listening`` is set once its
    socket listens."""
    import uvloop

    configure_logging(settings.log_level, settings.log_format)
    use_label_secret(os.environ)  # a spawned process: the parent's secret, not one of its own
    uvloop.run(run_bridge_worker(settings, parent_pid, listening.set))


async def run_bridge_worker(
    settings: BridgeSettings, parent_pid: int, listening: Callable[[], None]
) -> None:
    """One bridge worker: the bridge on its parent's port until SIGTERM or the parent goes;
    calls ``listening`` once its socket listens."""
    async with traces_to(settings.otlp_endpoint) as tracer_provider:
        runner, _ = await _start_bridge_alone(settings, tracer_provider, reuse_port=True)
        listening()
        try:
            ends = [
                asyncio.ensure_future(stop_signalled()),
                asyncio.ensure_future(parent_gone(parent_pid)),
            ]
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
            for end in ends:
                end.cancel()
        finally:
            await runner.cleanup()
