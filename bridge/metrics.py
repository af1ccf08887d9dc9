"""The bridge's Prometheus metrics and the ``GET /metrics`` endpoint of its HTTP port.

The endpoint exposes prometheus-client's process-wide registry: the bridge's own metrics and,
when the service runs in the same process (``omni-grpc serve``), the service's too, in one
scrape. With keys configured it answers only a caller that presents one in the
``Authorization`` header (401 otherwise): the port faces clients, and the counts are the
operator's. A scraper without a key reads them on ``--metrics-port``, a port of their own.
Labels are closed sets (HTTP status codes, reasons) or a key's hashed label, never keys or
session ids.
"""

from __future__ import annotations

from collections import defaultdict

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, generate_latest

from bridge.gate import Gate, unauthorized
from omni_grpc.wire.keys import bearer_credentials, key_label, key_matches

CONNECTIONS = Gauge("omni_grpc_bridge_connections", "Websockets the bridge carries now.")
REFUSALS = Counter(
    "omni_grpc_bridge_refusals",
    "Websocket upgrades refused before the upgrade (Host, Origin, key), by HTTP status.",
    ["status"],
)
KEY_REFUSALS = Counter(
    "omni_grpc_bridge_key_refusals",
    "Client secrets refused, by API key (a hash: omni_grpc.wire.keys.key_label) and reason "
    "(rate_limit_exceeded, client_secrets_outstanding).",
    ["key", "reason"],
)
FRAMES_HELD = Counter(
    "omni_grpc_bridge_frames_held",
    "Client frames that waited, unread, for room in the memory budget or their key's share "
    "of it, or for their key's audio allowance (bridge.frame_budget), by API key (a hash).",
    ["key"],
)


def metrics_handler(gate: Gate) -> Handler:
    """``GET /metrics``: the text exposition of every metric in the process, to a caller
    with one of the gate's keys when it has keys."""

    async def metrics(request: web.Request) -> web.StreamResponse:
        if gate.api_keys:
            key = bearer_credentials(request.headers.get("Authorization", ""))
            if not key_matches(key, gate.api_keys):
                return unauthorized()
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return metrics


def usage_handler(gate: Gate) -> Handler:
    """``GET /v1/omni/usage``: a key's own figures, to the key itself. Every counter of the
    process labelled by key (the service's too, under ``serve``) gives the samples of the
    caller's label, by metric and reason: what it was refused and held, and nobody else's."""

    async def usage(request: web.Request) -> web.StreamResponse:
        key = bearer_credentials(request.headers.get("Authorization", ""))
        if not gate.api_keys or not key_matches(key, gate.api_keys):
            return unauthorized()  # without keys, no caller is a tenant with figures
        label = key_label(key)
        figures: defaultdict[str, dict[str, float]] = defaultdict(dict)
        for metric in REGISTRY.collect():
            for sample in metric.samples:
                if sample.labels.get("key") != label or not sample.name.endswith("_total"):
                    continue
                figures[sample.name][sample.labels.get("reason", "")] = sample.value
        return web.json_response({"key_label": label, "counters": figures})

    return usage


__all__ = [
    "CONNECTIONS",
    "FRAMES_HELD",
    "KEY_REFUSALS",
    "REFUSALS",
    "metrics_handler",
    "usage_handler",
]
