"""The service's metrics through a real gRPC server without a bridge, on ``--metrics-port``.

A session is opened over gRPC, its stream dropped (detached, counted at scrape time), a resume
with a wrong token refused (counted by outcome and code), and the disconnect grace run out on the
server's fake clock: the session's end is counted as expired for ``disconnect_grace``. The
``--metrics-port`` setting's layers (file, environment, flag) are checked too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from omni_grpc.cli import build_parser
from omni_grpc.cli.config import ConfigError, resolve_bridge_settings, resolve_serve_settings
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import RunningServer
from omni_grpc.server.metrics_endpoint import start_metrics_endpoint
from omni_grpc.wire import pb
from tests.server.streams import open_stream
from tests.serving import FakeClock, serving, settings

GRACE_S = 5.0  # the test settings' disconnect grace
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def server(clock: FakeClock) -> AsyncIterator[RunningServer]:
    async with serving(settings(), clock=clock) as running:
        yield running


@pytest.fixture
async def metrics_port() -> AsyncIterator[int]:
    runner, port = await start_metrics_endpoint("127.0.0.1", 0)
    try:
        yield port
    finally:
        await runner.cleanup()


async def scrape(port: int) -> Samples:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_detach_refused_resume_and_expiry_are_counted(
    server: RunningServer, clock: FakeClock, metrics_port: int
) -> None:
    before = await scrape(metrics_port)
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        call, created = await open_stream(stub)
        call.cancel()  # the client goes away: the session waits, detached, for a resume
        detached = before
        async with asyncio.timeout(5):
            while value(detached, "omni_grpc_sessions_detached") <= value(
                before, "omni_grpc_sessions_detached"
            ):
                detached = await scrape(metrics_port)
        assert (
            value(detached, "omni_grpc_sessions_opened_total")
            - value(before, "omni_grpc_sessions_opened_total")
            == 1
        )

        wrong = stub.Converse()  # type: ignore[call-arg]
        resume = pb.ResumeSession(session_id=created.session.id, resume_token="not-the-token")
        await wrong.write(pb.ConverseRequest(resume_session=resume))
        with pytest.raises(grpc.aio.AioRpcError):
            await wrong.read()
    refused = await scrape(metrics_port)
    assert (
        value(refused, "omni_grpc_resumes_total", outcome="refused")
        - value(before, "omni_grpc_resumes_total", outcome="refused")
        == 1
    )
    codes = {
        labels
        for (name, labels), count in refused.items()
        if name == "omni_grpc_stream_refusals_total" and count > value(before, name, **dict(labels))
    }
    assert len(codes) == 1 and ("first", "resume") in next(iter(codes))

    clock.advance(GRACE_S + 0.1)
    server.sessions.expire_due()
    after = await scrape(metrics_port)
    ended = "omni_grpc_sessions_ended_total"
    assert (
        value(after, ended, reason="disconnect_grace")
        - value(before, ended, reason="disconnect_grace")
        == 1
    )
    assert value(after, "omni_grpc_sessions_detached") == value(
        before, "omni_grpc_sessions_detached"
    )


def test_the_metrics_port_is_off_by_default_and_set_by_flag_variable_or_file(
    tmp_path: Path,
) -> None:
    parse = build_parser().parse_args
    assert resolve_serve_settings(parse(["serve"]), {}).metrics_port is None
    config = tmp_path / "omni.toml"
    config.write_text("metrics_port = 9101\n")
    from_file = resolve_serve_settings(parse(["serve", "--config", str(config)]), {})
    assert from_file.metrics_port == 9101
    from_env = resolve_serve_settings(parse(["serve"]), {"OMNI_GRPC_METRICS_PORT": "9102"})
    assert from_env.metrics_port == 9102
    flag = parse(["serve", "--http-port", "0", "--metrics-port", "9103"])
    assert resolve_serve_settings(flag, {"OMNI_GRPC_METRICS_PORT": "9102"}).metrics_port == 9103
    with pytest.raises(ConfigError, match="metrics_port"):
        resolve_serve_settings(parse(["serve", "--metrics-port", "70000"]), {})
    bridge = ["bridge", "--grpc-target", "10.0.0.1:50051"]
    assert resolve_bridge_settings(parse(bridge), {}).metrics_port is None
    with_port = parse([*bridge, "--metrics-port", "9104"])
    assert resolve_bridge_settings(with_port, {}).metrics_port == 9104
