"""The server's turn traces seen from a raw gRPC client, and OTLP export from ``omni-grpc serve``.

A client that sends ``trace_context`` has the server's turn span made its child; one that sends
none (or a context that does not parse) gets a root turn span per turn. ``serve`` started with
``--otlp-endpoint`` (or the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``) sends the spans of a turn
through the bridge to a real OTLP/gRPC collector (a stub of the collector's service, in this
process); started without, it sends nothing, and the collector hears from nobody.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from omni_cli import build_parser, resolve_bridge_settings, resolve_serve_settings
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import start_server
from omni_grpc.server.tracing import TurnTraces, server_tracer
from omni_grpc.wire import pb
from tests.serving import settings

from .streams import open_stream, pcm16, read_until

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "omni_cli"]
TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
PARENT_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01"
STAGES = {"omni.lm.first_token", "omni.tts.first_audio"}  # the loopback engine's


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


@contextlib.asynccontextmanager
async def traced_stub(
    exporter: InMemorySpanExporter, pace: str = "fast"
) -> AsyncIterator[duplex_pb2_grpc.DuplexServiceStub]:
    """A loopback server at ``pace`` that traces into ``exporter``, and a raw stub on it."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    running = await start_server(settings(engine_options={"pace": pace}), tracer_provider=provider)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            yield duplex_pb2_grpc.DuplexServiceStub(channel)
    finally:
        await running.stop()
        provider.shutdown()


@pytest.fixture
async def stub(
    exporter: InMemorySpanExporter,
) -> AsyncIterator[duplex_pb2_grpc.DuplexServiceStub]:
    async with traced_stub(exporter) as stub:
        yield stub


async def one_turn(
    stub: duplex_pb2_grpc.DuplexServiceStub, trace_context: dict[str, str] | None = None
) -> None:
    """A committed turn answered to its response_done; the commit carries ``trace_context``."""
    call, _ = await open_stream(stub)
    audio = pb.AppendInputAudio(audio=pcm16(200))
    await call.write(pb.ConverseRequest(client_seq=1, append_input_audio=audio))
    commit = pb.ConverseRequest(
        client_seq=2, commit_input_audio=pb.CommitInputAudio(create_response=True)
    )
    commit.trace_context.update(trace_context or {})
    await call.write(commit)
    await read_until(call, "response_done")
    await call.done_writing()


def turns_and_stages(spans: tuple[ReadableSpan, ...]) -> tuple[ReadableSpan, set[str]]:
    """The one turn span, and the names of the spans under it."""
    [turn] = [span for span in spans if span.name == "omni.turn"]
    under = {
        span.name
        for span in spans
        if span.parent is not None and span.parent.span_id == turn.context.span_id
    }
    return turn, under


async def test_a_turn_continues_the_trace_its_client_sent(
    stub: duplex_pb2_grpc.DuplexServiceStub, exporter: InMemorySpanExporter
) -> None:
    await one_turn(stub, {"traceparent": TRACEPARENT, "tracestate": "vendor=1"})
    turn, stages = turns_and_stages(exporter.get_finished_spans())
    assert turn.parent is not None and turn.parent.is_remote
    assert (turn.context.trace_id, turn.parent.span_id) == (TRACE_ID, PARENT_ID)
    assert turn.context.trace_state.get("vendor") == "1"
    assert turn.attributes is not None
    assert turn.attributes["omni.turn.opened_by"] == "commit_input_audio"
    assert stages == STAGES


@pytest.mark.parametrize(
    "trace_context",
    [
        None,
        {"traceparent": "not-a-traceparent"},
        {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"},
    ],
    ids=["none", "garbage", "all-zero ids"],
)
async def test_a_turn_without_a_usable_context_is_a_root_of_its_own(
    stub: duplex_pb2_grpc.DuplexServiceStub,
    exporter: InMemorySpanExporter,
    trace_context: dict[str, str] | None,
) -> None:
    await one_turn(stub, trace_context)
    turn, stages = turns_and_stages(exporter.get_finished_spans())
    assert turn.parent is None
    assert turn.attributes is not None
    # Without a context the turn opens with the engine's first event of it.
    opened_by = "commit_input_audio" if trace_context else "input_committed"
    assert turn.attributes["omni.turn.opened_by"] == opened_by
    assert turn.attributes["omni.turn.ended_by"] == "response_done"
    assert stages == STAGES


def traceparent(span_id: int) -> dict[str, str]:
    return {"traceparent": f"00-{TRACE_ID:032x}-{span_id:016x}-01"}


async def test_a_context_sent_during_an_answer_opens_its_turn_once_the_answer_is_done(
    exporter: InMemorySpanExporter,
) -> None:
    """A client that resumed mid-answer starts its next turn while the answer still plays: the
    answer's events stay in their own turn, and the new turn keeps its start."""
    first, second = 0xA1, 0xB2
    async with traced_stub(exporter, pace="realtime") as stub:
        call, _ = await open_stream(stub)
        audio = pb.AppendInputAudio(audio=pcm16(400))
        await call.write(pb.ConverseRequest(client_seq=1, append_input_audio=audio))
        commit = pb.CommitInputAudio(create_response=True)
        request = pb.ConverseRequest(client_seq=2, commit_input_audio=commit)
        request.trace_context.update(traceparent(first))
        await call.write(request)
        await read_until(call, "output_audio_delta")  # answering, in real time
        request = pb.ConverseRequest(client_seq=3, append_input_audio=audio)
        request.trace_context.update(traceparent(second))
        await call.write(request)
        [*_, answered] = await read_until(call, "response_done")
        request = pb.ConverseRequest(client_seq=4, commit_input_audio=commit)
        request.trace_context.update(traceparent(second))
        await call.write(request)
        [*_, next_answer] = await read_until(call, "response_done")
        await call.done_writing()
    turns = sorted(
        (span for span in exporter.get_finished_spans() if span.name == "omni.turn"),
        key=lambda span: span.start_time or 0,
    )
    assert [turn.parent.span_id for turn in turns if turn.parent] == [first, second]
    responses = [answered.response_done.response.id, next_answer.response_done.response.id]
    for turn, response_id in zip(turns, responses, strict=True):
        assert turn.attributes is not None
        assert turn.attributes["omni.turn.ended_by"] == "response_done"
        assert turn.attributes["omni.response.id"] == response_id
    [earlier, later] = turns
    assert later.attributes is not None
    assert later.attributes["omni.turn.opened_by"] == "append_input_audio"
    assert earlier.end_time is not None and later.start_time is not None
    assert later.start_time < earlier.end_time  # it began when its command came
    for turn in turns:
        under = [
            span.name
            for span in exporter.get_finished_spans()
            if span.parent is not None and span.parent.span_id == turn.context.span_id
        ]
        assert sorted(under) == sorted(STAGES), turn.attributes


# ---------------------------------------------------------------- OTLP from a real serve


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace collector that keeps what it is sent."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    async def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: object
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[tuple[str, str]]:
        """(service name, span name) of every span received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                attributes = {
                    a.key: a.value.string_value for a in resource_spans.resource.attributes
                }
                for scope_spans in resource_spans.scope_spans:
                    found += [(attributes["service.name"], s.name) for s in scope_spans.spans]
        return found


@pytest.fixture
async def collector() -> AsyncIterator[tuple[Collector, int]]:
    server = grpc.aio.server()
    kept = Collector()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(kept, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield kept, port
    finally:
        await server.stop(0)


async def serve_one_turn(*flags: str, env: dict[str, str]) -> None:
    """``omni-grpc serve`` (loopback, with its bridge) answers one turn, then stops on SIGTERM.

    The process runs under asyncio, so the collector in this loop answers its exports; the
    spans still batched are sent when it stops.
    """
    process = await asyncio.create_subprocess_exec(
        *CLI,
        "serve",
        "--engine",
        "loopback",
        "--grpc-port",
        "0",
        "--http-port",
        str(free_port()),  # 0 would turn the bridge off
        "--shutdown-grace-s",
        "1",
        *flags,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert process.stdout is not None
        banner = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        bridge = re.search(r"http://127\.0\.0\.1:(\d+)/", banner)
        assert bridge, banner
        url = f"http://127.0.0.1:{bridge.group(1)}/v1/realtime?model=loopback"
        async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
            assert (await ws.receive_json(timeout=10))["type"] == "session.created"
            audio = base64.b64encode(pcm16(200)).decode()
            await ws.send_json({"type": "input_audio_buffer.append", "audio": audio})
            await ws.send_json({"type": "input_audio_buffer.commit", "create_response": True})
            while (await ws.receive_json(timeout=10))["type"] != "response.done":
                pass
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def child_env(**extra: str) -> dict[str, str]:
    """This environment without any OTEL_* setting of its own, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


@pytest.mark.subprocess
async def test_serve_exports_turns_over_otlp_only_when_asked(
    collector: tuple[Collector, int],
) -> None:
    kept, port = collector
    endpoint = f"http://127.0.0.1:{port}"
    await serve_one_turn(env=child_env())
    assert kept.requests == []  # off by default: nothing is sent
    await serve_one_turn("--otlp-endpoint", endpoint, env=child_env())
    flagged = kept.spans()
    assert {("omni-grpc", name) for name in ("omni.bridge.turn", "omni.turn", *STAGES)} <= set(
        flagged
    )
    await serve_one_turn(
        env=child_env(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_SERVICE_NAME="speech-edge")
    )
    from_environment = kept.spans()[len(flagged) :]
    assert ("speech-edge", "omni.turn") in from_environment
    assert ("speech-edge", "omni.bridge.turn") in from_environment


# ---------------------------------------------------------------- where the settings come from


def serve_endpoint(*flags: str, **environ: str) -> str | None:
    args = build_parser().parse_args(["serve", *flags])
    return resolve_serve_settings(args, environ).otlp_endpoint


def bridge_endpoint(*flags: str, **environ: str) -> str | None:
    args = build_parser().parse_args(["bridge", "--grpc-target", "127.0.0.1:1", *flags])
    return resolve_bridge_settings(args, environ).otlp_endpoint


def test_the_endpoint_comes_from_flags_settings_or_the_standard_variables(tmp_path: Path) -> None:
    collector = "http://collector:4317"
    assert serve_endpoint() is None and bridge_endpoint() is None  # off by default
    assert serve_endpoint("--otlp-endpoint", collector) == collector
    assert bridge_endpoint("--otlp-endpoint", collector) == collector
    assert serve_endpoint(OMNI_GRPC_OTLP_ENDPOINT=collector) == collector
    config = tmp_path / "serve.toml"
    config.write_text(f'otlp_endpoint = "{collector}"\n')
    assert serve_endpoint("--config", str(config)) == collector
    for variable in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        assert serve_endpoint(**{variable: collector}) == collector
        assert bridge_endpoint(**{variable: collector}) == collector
    # The traces' own variable wins over the general one, and a flag over both.
    both = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector,
    }
    assert serve_endpoint(**both) == collector
    assert serve_endpoint("--otlp-endpoint", "http://b:4317", **both) == "http://b:4317"
    # The SDK's own switches turn tracing off whatever is named.
    assert serve_endpoint("--otlp-endpoint", collector, OTEL_SDK_DISABLED="true") is None
    assert bridge_endpoint("--otlp-endpoint", collector, OTEL_TRACES_EXPORTER="none") is None


def test_the_turn_carries_the_judgement_that_ended_it(exporter: InMemorySpanExporter) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = server_tracer(provider)
    assert tracer is not None
    traces = TurnTraces(tracer, "s1")
    judged = [  # a hesitation, then the end of the turn
        pb.TurnEndDecision(probability=0.02, wait_ms=4000, decided_ms=180.0),
        pb.TurnEndDecision(
            probability=0.97,
            wait_ms=200,
            decided_ms=240.0,
            sound_probability=0.99,
            words_probability=0.95,
        ),
    ]
    events = [
        pb.ConverseResponse(speech_started=pb.SpeechStarted()),
        *(pb.ConverseResponse(turn_end_decision=decision) for decision in judged),
        pb.ConverseResponse(speech_stopped=pb.SpeechStopped()),
        pb.ConverseResponse(response_created=pb.ResponseCreated(response=pb.Response(id="r1"))),
        pb.ConverseResponse(response_done=pb.ResponseDone(response=pb.Response(id="r1"))),
    ]
    for event in events:
        traces.engine_event(event.WhichOneof("event"), event)
    [turn] = [span for span in exporter.get_finished_spans() if span.name == "omni.turn"]
    assert turn.attributes is not None
    assert turn.attributes["omni.turn_end.probability"] == pytest.approx(0.97)
    assert turn.attributes["omni.turn_end.wait_ms"] == 200
    assert turn.attributes["omni.turn_end.decided_ms"] == 240.0
    assert turn.attributes["omni.turn_end.sound_probability"] == pytest.approx(0.99)
    assert turn.attributes["omni.turn_end.words_probability"] == pytest.approx(0.95)
    provider.shutdown()


def test_a_judge_that_did_not_judge_leaves_no_attribute(exporter: InMemorySpanExporter) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = server_tracer(provider)
    assert tracer is not None
    traces = TurnTraces(tracer, "s1")
    heard_only = pb.TurnEndDecision(probability=0.8, wait_ms=300, sound_probability=0.8)
    events = [
        pb.ConverseResponse(speech_started=pb.SpeechStarted()),
        pb.ConverseResponse(turn_end_decision=heard_only),
        pb.ConverseResponse(response_created=pb.ResponseCreated(response=pb.Response(id="r1"))),
        pb.ConverseResponse(response_done=pb.ResponseDone(response=pb.Response(id="r1"))),
    ]
    for event in events:
        traces.engine_event(event.WhichOneof("event"), event)
    [turn] = [span for span in exporter.get_finished_spans() if span.name == "omni.turn"]
    assert turn.attributes is not None
    assert turn.attributes["omni.turn_end.sound_probability"] == pytest.approx(0.8)
    assert "omni.turn_end.words_probability" not in turn.attributes
    provider.shutdown()


def test_a_transcription_session_turn_ends_at_its_transcript_or_failure(
    exporter: InMemorySpanExporter,
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = server_tracer(provider)
    assert tracer is not None
    traces = TurnTraces(tracer, "s1")
    failed = pb.InputTranscriptionFailed(item_id="i2")
    events = [
        pb.ConverseResponse(speech_started=pb.SpeechStarted()),
        pb.ConverseResponse(input_committed=pb.InputCommitted(item_id="i1")),
        pb.ConverseResponse(input_transcription=pb.InputTranscription(transcript="hello")),
        pb.ConverseResponse(speech_started=pb.SpeechStarted()),
        pb.ConverseResponse(input_committed=pb.InputCommitted(item_id="i2")),
        pb.ConverseResponse(input_transcription_failed=failed),
    ]
    for event in events:
        traces.engine_event(event.WhichOneof("event"), event, transcribing=True)
    spans = exporter.get_finished_spans()
    turns = [span for span in spans if span.name == "omni.turn"]
    assert [turn.attributes["omni.turn.ended_by"] for turn in turns if turn.attributes] == [
        "input_transcription",
        "input_transcription_failed",
    ]
    asr = [span.attributes for span in spans if span.name == "omni.asr"]
    assert [dict(a or {}).get("omni.failed") for a in asr] == [None, 1]
    provider.shutdown()
