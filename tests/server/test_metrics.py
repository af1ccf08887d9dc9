"""The service's metrics through a real gRPC server without a bridge, on ``--metrics-port``.

A session is opened over gRPC, its stream dropped (detached, counted at scrape time), a resume
with a wrong token refused (counted by outcome and code), and the disconnect grace run out on the
server's fake clock: the session's end is counted as expired for ``disconnect_grace``. A
takeover, refusals for rate and the journal's bytes are counted too, and the ``--metrics-port``
setting's layers (file, environment, flag) are checked.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from omni_cli import build_parser
from omni_cli.config import ConfigError, resolve_bridge_settings, resolve_serve_settings
from omni_grpc.core import Limits
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import RunningServer
from omni_grpc.server.metrics_endpoint import start_metrics_endpoint
from omni_grpc.wire import pb
from tests.server.streams import open_stream, pcm16, read, read_until
from tests.serving import FakeClock, serving, settings

GRACE_S = 5.0  # the test settings' disconnect grace
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def server_clock(clock: FakeClock) -> FakeClock:
    """The shared ``server`` measures deadlines on the clock the test moves."""
    return clock


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
    # The gauges walk every server of the process still alive: those earlier tests stopped
    # leave now, not at a collection in the middle of this test (the detached count fell so).
    gc.collect()
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


async def test_a_takeover_is_counted_apart_from_a_resume(
    server: RunningServer, metrics_port: int
) -> None:
    before = await scrape(metrics_port)
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        first, created = await open_stream(stub)
        second = stub.Converse()  # type: ignore[call-arg]
        resume = pb.ResumeSession(session_id=created.session.id, resume_token=created.resume_token)
        await second.write(pb.ConverseRequest(resume_session=resume))
        assert (await read(second)).WhichOneof("event") == "session_resumed"
        assert (await read(first)).WhichOneof("event") == "session_replaced"
        after = await scrape(metrics_port)
        second.cancel()
    resumes = "omni_grpc_resumes_total"
    assert (
        value(after, resumes, outcome="taken_over") - value(before, resumes, outcome="taken_over")
        == 1
    )
    assert value(after, resumes, outcome="resumed") == value(before, resumes, outcome="resumed")


async def test_refusals_for_rate_and_journal_bytes_are_counted(
    clock: FakeClock, metrics_port: int
) -> None:
    # A bucket of 20 commands: of 22 appends written at once, the last 2 are refused.
    limits = Limits(disconnect_grace_s=GRACE_S, session_commands_per_s=20.0, rate_burst_s=1.0)
    before = await scrape(metrics_port)
    async with (
        serving(settings(limits=limits), clock=clock) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        call, _ = await open_stream(stub)
        for seq in range(1, 23):
            audio = pb.AppendInputAudio(audio=pcm16(10))
            await call.write(pb.ConverseRequest(client_seq=seq, append_input_audio=audio))
        errors = [await read(call) for _ in range(2)]
        assert [e.error.code for e in errors] == ["rate_limit_exceeded"] * 2
        clock.advance(0.05)
        commit = pb.ConverseRequest(client_seq=23, commit_input_audio=pb.CommitInputAudio())
        await call.write(commit)
        await read_until(call, "response_done")
        during = await scrape(metrics_port)
        await call.done_writing()
    refusals = "omni_grpc_command_refusals_total"
    code = "rate_limit_exceeded"
    assert value(during, refusals, code=code) - value(before, refusals, code=code) == 2
    # The two errors and the answer are journaled until the client acknowledges them.
    assert value(during, "omni_grpc_journal_bytes") > value(before, "omni_grpc_journal_bytes")
    assert ("omni_grpc_send_queue_events", ()) in during
