"""Per-turn traces across the bridge -> gRPC hop, and none when tracing is off.

The service and its bridge run as ``omni-grpc serve`` runs them (:func:`start_service`), with an
SDK tracer provider whose spans land in the SDK's in-memory exporter. A websocket client speaks
one turn; its trace must hold the bridge's turn span as the root and the server's turn span as
its child (the context crossed the hop in ``ConverseRequest.trace_context``), with the stage
spans under the server's. The loopback engine here checks the link and the response stages; the
embedded engine (real VAD and ASR) checks every stage, with real speech. Without a provider,
the relay and the session hosts hold no tracing state and the commands carry no context.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from bridge.app import BRIDGE
from omni_cli.config import ServeSettings
from omni_cli.launch import Service, start_service
from omni_grpc.server.host import SessionHost
from omni_grpc.server.settings import ServerSettings
from omni_grpc.server.tracing import TurnTraces
from omni_grpc.wire import pb
from tests.bridge.testkit import realtime_socket, service_settings

APPEND_100MS = {
    "type": "input_audio_buffer.append",
    "audio": base64.b64encode(b"\x00\x08" * 2400).decode(),
}
SILENCE_1S = base64.b64encode(bytes(48000)).decode()  # pcm16 at 24 kHz


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, str]]]:
    """Every command the service's hosts receive: its kind and its trace context."""
    seen: list[tuple[str, dict[str, str]]] = []
    receive = SessionHost.receive_now  # the streams' way in (``receive`` goes through it)

    def recording(
        host: SessionHost, generation: int, request: pb.ConverseRequest, size: int = 0
    ) -> float | Coroutine[Any, Any, float]:
        seen.append((str(request.WhichOneof("command")), dict(request.trace_context)))
        return receive(host, generation, request, size)

    monkeypatch.setattr(SessionHost, "receive_now", recording)
    return seen


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """A provider that hands every span, as it ends, to the in-memory exporter."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@contextlib.asynccontextmanager
async def started(
    server: ServerSettings, provider: TracerProvider | None
) -> AsyncIterator[Service]:
    """``serve``'s service and bridge on free ports, tracing to ``provider`` (None: off)."""
    service = await start_service(
        ServeSettings(server=server, http_port=0), tracer_provider=provider
    )
    try:
        yield service
    finally:
        await service.stop()


def number(span: ReadableSpan, key: str) -> float:
    """A numeric attribute of ``span``."""
    assert span.attributes is not None
    value = span.attributes[key]
    assert isinstance(value, int | float), (key, value)
    return value


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def the_turn(spans: tuple[ReadableSpan, ...]) -> tuple[ReadableSpan, ReadableSpan]:
    """The bridge's turn span and the server's, checked linked across the hop."""
    [bridge_turn] = named(spans, "omni.bridge.turn")
    [server_turn] = named(spans, "omni.turn")
    assert bridge_turn.parent is None  # the root of the turn's trace
    assert bridge_turn.kind is SpanKind.CLIENT and server_turn.kind is SpanKind.SERVER
    assert server_turn.parent is not None and server_turn.parent.is_remote
    assert server_turn.parent.span_id == bridge_turn.context.span_id
    assert server_turn.context.trace_id == bridge_turn.context.trace_id
    assert {span.context.trace_id for span in spans} == {bridge_turn.context.trace_id}
    return bridge_turn, server_turn


def stages_of(spans: tuple[ReadableSpan, ...], turn: ReadableSpan) -> dict[str, ReadableSpan]:
    """The stage spans under ``turn``, by name, each within the turn's time."""
    stages = {}
    for span in spans:
        if span.parent is not None and span.parent.span_id == turn.context.span_id:
            assert span.name not in stages, f"two {span.name} spans in one turn"
            assert span.start_time is not None and span.end_time is not None
            assert turn.start_time is not None and turn.end_time is not None
            assert turn.start_time <= span.start_time <= span.end_time <= turn.end_time
            stages[span.name] = span
    return stages


async def test_one_turn_is_one_trace_linked_across_the_bridge_hop(
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    commands: list[tuple[str, dict[str, str]]],
) -> None:
    async with started(service_settings(), provider) as service:
        assert service.http_port is not None
        async with realtime_socket(service.http_port) as ws:
            assert (await ws.recv())["type"] == "session.created"
            for _ in range(3):
                await ws.send(APPEND_100MS)
            await ws.send({"type": "input_audio_buffer.commit", "create_response": True})
            [*_, done] = await ws.until("response.done")
        response_id = done["response"]["id"]
    spans = exporter.get_finished_spans()
    bridge_turn, server_turn = the_turn(spans)
    assert bridge_turn.attributes is not None and server_turn.attributes is not None
    assert bridge_turn.attributes["omni.turn.opened_by"] == "append_input_audio"
    assert bridge_turn.attributes["omni.turn.ended_by"] == "response_done"
    assert bridge_turn.attributes["omni.response.id"] == response_id
    assert server_turn.attributes["omni.turn.opened_by"] == "append_input_audio"
    assert server_turn.attributes["omni.turn.ended_by"] == "response_done"
    assert server_turn.attributes["omni.response.id"] == response_id
    status = pb.ResponseStatus.Name(pb.RESPONSE_STATUS_COMPLETED)
    assert server_turn.attributes["omni.response.status"] == status
    assert number(server_turn, "omni.latency.first_audio_ms") > 0
    stages = stages_of(spans, server_turn)
    # The loopback engine has no VAD and writes nothing down: the response's stages only.
    assert set(stages) == {"omni.lm.first_token", "omni.tts.first_audio"}
    # The context rode on the append that opened the turn and on the commit, not on the rest.
    carried = [(kind, context) for kind, context in commands if context]
    assert [kind for kind, _ in carried] == ["append_input_audio", "commit_input_audio"]
    trace_id, span_id = bridge_turn.context.trace_id, bridge_turn.context.span_id
    for _, context in carried:
        assert context["traceparent"].startswith(f"00-{trace_id:032x}-{span_id:016x}-")


async def test_nothing_is_traced_when_tracing_is_off(
    commands: list[tuple[str, dict[str, str]]],
) -> None:
    async with started(service_settings(), None) as service:
        assert service.http_port is not None and service.bridge is not None
        async with realtime_socket(service.http_port) as ws:
            assert (await ws.recv())["type"] == "session.created"
            [host] = service.server.sessions
            [relay] = service.bridge.app[BRIDGE].relays
            assert host.taps.of(TurnTraces) is None and relay._turns is None
            await ws.send(APPEND_100MS)
            await ws.send({"type": "input_audio_buffer.commit", "create_response": True})
            await ws.until("response.done")
    kinds = [kind for kind, _ in commands]
    assert "append_input_audio" in kinds and "commit_input_audio" in kinds
    assert all(not context for _, context in commands)


async def test_a_spoken_turn_has_every_stage_span(
    provider: TracerProvider, exporter: InMemorySpanExporter, speech: bytes
) -> None:
    """Real speech through the embedded engine: server VAD ends the turn, Whisper writes it
    down, the echo responder answers through espeak-ng."""
    embedded = ServerSettings(
        grpc_port=0, engine="embedded", engine_options={"responder": "echo", "pace": "fast"}
    )
    async with started(embedded, provider) as service:
        assert service.http_port is not None
        async with realtime_socket(service.http_port) as ws:
            assert (await ws.recv())["type"] == "session.created"
            chunk = 4800  # 100 ms of pcm16 at 24 kHz
            for start in range(0, len(speech), chunk):
                audio = base64.b64encode(speech[start : start + chunk]).decode()
                await ws.send({"type": "input_audio_buffer.append", "audio": audio})
            await ws.send({"type": "input_audio_buffer.append", "audio": SILENCE_1S})
            events = await ws.until("response.done", wait_s=60)
    kinds = [event["type"] for event in events]
    assert "input_audio_buffer.speech_stopped" in kinds
    spans = exporter.get_finished_spans()
    _, server_turn = the_turn(spans)
    stages = stages_of(spans, server_turn)
    assert set(stages) == {"omni.vad", "omni.asr", "omni.lm.first_token", "omni.tts.first_audio"}
    vad, asr = stages["omni.vad"], stages["omni.asr"]
    assert number(vad, "omni.audio_end_ms") > 0
    assert number(asr, "omni.transcript_chars") > 0
    # The stages in the order a spoken turn passes them, each starting where its input was ready.
    assert vad.end_time is not None and asr.start_time is not None
    assert vad.end_time <= asr.start_time
    lm, tts = stages["omni.lm.first_token"], stages["omni.tts.first_audio"]
    assert asr.end_time is not None and lm.start_time is not None
    assert asr.end_time <= lm.start_time
    # The engine told when the responder's first piece came (its text goes out only with the
    # audio made from it), so speech synthesis is timed from there to the first audio.
    assert lm.end_time is not None and tts.start_time == lm.end_time
