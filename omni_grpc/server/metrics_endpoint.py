"""``GET /metrics`` on a port of its own (``--metrics-port``), for a process without a bridge port.

With a ``readiness`` callable it also answers ``GET /health``: 200 while the replica takes new
work, 503 while it drains, with a JSON body (durability, sessions); it is what the proxy in front
of several replicas checks (deploy/haproxy).

``omni-grpc serve`` with the bridge on exposes the metrics on the bridge's HTTP port; this
endpoint is for ``serve`` without the bridge, or any process whose operator wants the metrics
apart from client traffic (e.g. a port only the monitoring network reaches). It serves
prometheus-client's process-wide registry and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest


async def _metrics(request: web.Request) -> web.Response:
    body = generate_latest(REGISTRY)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def start_metrics_endpoint(
    host: str,
    port: int,
    readiness: Callable[[], tuple[bool, dict[str, object]]] | None = None,
) -> tuple[web.AppRunner, int]:
    """Serves ``/metrics`` (and ``/health`` with ``readiness``) on ``host:port`` (0 picks a
    port); returns the runner and the port."""
    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    if readiness is not None:

        async def _health(request: web.Request) -> web.Response:
            ready, state = readiness()
            return web.json_response(state, status=200 if ready else 503)

        app.router.add_get("/health", _health)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner, int(runner.addresses[0][1])


__all__ = ["start_metrics_endpoint"]
