"""Prometheus metrics, scraped over HTTP during a real conversation through the service and bridge.

``omni-grpc serve`` is started as the CLI starts it (the service, its bridge on the HTTP port, and
``--metrics-port``); a websocket client holds one conversation while the test scrapes ``/metrics``
on both ports and checks what changed: a session opened and attached, the commands counted by
kind, a refused command counted by its code, the host's time per append observed, one
response's latencies observed, the bridge's connection and refusal counted, and the session's
end counted by its reason. The Grafana dashboard in deploy/ is checked against a scrape: every
metric its queries name exists.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from omni_cli.config import ServeSettings
from omni_cli.launch import Service, start_service
from tests.bridge.testkit import WITH_EXTENSIONS, realtime_socket, service_settings

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "omni-grpc.json"
APPEND_100MS = {
    "type": "input_audio_buffer.append",
    "audio": base64.b64encode(b"\x00\x08" * 2400).decode(),
}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    """``serve`` with its bridge and a metrics port of its own, both on free ports."""
    running = await start_service(
        ServeSettings(server=service_settings(), http_port=0, metrics_port=0)
    )
    try:
        yield running
    finally:
        await running.stop()


async def scrape_text(port: int) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return await response.text()


async def scrape(port: int) -> Samples:
    """Every sample of one scrape, keyed by its name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(await scrape_text(port))
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def grew(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def test_a_conversation_moves_the_counters_and_histograms(service: Service) -> None:
    assert service.http_port is not None and service.metrics_port is not None
    before = await scrape(service.http_port)
    async with realtime_socket(service.http_port, WITH_EXTENSIONS) as ws:
        assert (await ws.recv())["type"] == "session.created"
        during = await scrape(service.http_port)
        assert grew(before, during, "omni_grpc_sessions_opened_total") == 1
        assert value(during, "omni_grpc_sessions_attached") >= 1
        assert value(during, "omni_grpc_bridge_connections") >= 1
        await ws.send({"type": "input_audio_buffer.commit"})  # nothing to commit: refused
        assert (await ws.recv())["error"]["code"] == "input_audio_buffer_empty"
        for _ in range(3):
            await ws.send(APPEND_100MS)
        await ws.send({"type": "input_audio_buffer.commit", "create_response": True})
        await ws.until("response.done")
        answered = await scrape(service.http_port)
        kinds = "omni_grpc_commands_total"
        assert grew(before, answered, kinds, kind="append_input_audio") == 3
        assert grew(before, answered, kinds, kind="commit_input_audio") == 2
        refusals = "omni_grpc_command_refusals_total"
        assert grew(before, answered, refusals, code="input_audio_buffer_empty") == 1
        # Sampled: the session's first append is timed, then one in 16 (omni_grpc.server.host).
        assert grew(before, answered, "omni_grpc_append_handling_seconds_count") == 1
        assert grew(before, answered, "omni_grpc_append_handling_seconds_sum") > 0
        events = "omni_grpc_engine_events_total"
        assert grew(before, answered, events, kind="response_done") == 1
        assert grew(before, answered, events, kind="output_audio_delta") >= 1
        for latency in ("first_audio", "total"):
            name = f"omni_grpc_response_{latency}_seconds"
            assert grew(before, answered, f"{name}_count") == 1, name
            assert grew(before, answered, f"{name}_sum") > 0, name
        assert grew(before, answered, "omni_grpc_response_real_time_factor_count") == 1
        # Read at scrape time from the live sessions: present, and never negative.
        for gauge in (
            "omni_grpc_journal_bytes",
            "omni_grpc_send_queue_events",
            "omni_grpc_engine_commands_queued",
            "omni_grpc_engine_events_queued",
        ):
            assert (gauge, ()) in answered and value(answered, gauge) >= 0, gauge
        assert value(answered, "omni_grpc_journal_bytes") > 0  # the turn's events, unacked
        await ws.send({"type": "session.close", "reason": "done here"})
        await ws.until("session.closed")
    # The port of its own shows the same registry, the end counted by its reason.
    after = await scrape(service.metrics_port)
    assert grew(before, after, "omni_grpc_sessions_ended_total", reason="closed") == 1
    assert grew(before, after, "omni_grpc_sessions_ended_total", reason="idle_timeout") == 0
    assert value(after, "omni_grpc_sessions_attached") == value(
        before, "omni_grpc_sessions_attached"
    )


async def test_a_refused_upgrade_is_counted_by_status(service: Service) -> None:
    assert service.http_port is not None
    before = await scrape(service.http_port)
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"http://127.0.0.1:{service.http_port}/v1/realtime?model=m",
            headers={"Origin": "https://evil.example", "Upgrade": "websocket"},
        ) as response,
    ):
        assert response.status == 403
    after = await scrape(service.http_port)
    assert grew(before, after, "omni_grpc_bridge_refusals_total", status="403") == 1


def dashboard_metric_names() -> set[str]:
    """Every ``omni_grpc_*`` name that a query of the dashboard uses."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    assert exprs, "the dashboard has queries"
    return {name for expr in exprs for name in re.findall(r"\bomni_grpc_[a-z_]+", expr)}


async def test_every_metric_the_dashboard_queries_exists_in_a_scrape(service: Service) -> None:
    assert service.metrics_port is not None
    families = list(text_string_to_metric_families(await scrape_text(service.metrics_port)))
    # A labelled counter with no child yet has no sample, but its family is in the scrape.
    known = {family.name for family in families} | {
        sample.name for family in families for sample in family.samples
    }
    suffixes = ("_total", "_bucket", "_count", "_sum")
    missing = {
        name
        for name in dashboard_metric_names()
        if name not in known
        and not any(name.endswith(s) and name.removesuffix(s) in known for s in suffixes)
    }
    assert not missing
