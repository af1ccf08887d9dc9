"""The bridge's Prometheus metrics and the ``GET /metrics`` endpoint of its HTTP port.

The endpoint exposes prometheus-client's process-wide registry: the bridge's own metrics and,
when the service runs in the same process (``omni-grpc serve``), the service's too, in one
scrape. Labels are HTTP status codes only (a closed set), never keys or session ids.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, generate_latest

CONNECTIONS = Gauge("omni_grpc_bridge_connections", "Websockets the bridge carries now.")
REFUSALS = Counter(
    "omni_grpc_bridge_refusals",
    "Websocket upgrades refused before the upgrade (Host, Origin, key), by HTTP status.",
    ["status"],
)


async def metrics_handler(request: web.Request) -> web.Response:
    """The text exposition of every metric in the process."""
    body = generate_latest(REGISTRY)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


__all__ = ["CONNECTIONS", "REFUSALS", "metrics_handler"]
