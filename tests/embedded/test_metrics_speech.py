"""The end-of-speech-to-first-audio histogram, through the real gRPC server and the embedded engine.

Only an engine with server VAD says when the user stopped speaking (``speech_stopped``), so this
metric is checked here: a spoken question goes to the server, the answer comes back, and a scrape
of ``/metrics`` (on a metrics port of its own) shows one observation of
``omni_grpc_speech_end_to_first_audio_seconds`` no longer than the turn itself took.
"""

from __future__ import annotations

import time

import aiohttp
import grpc
import numpy as np
import soxr
from prometheus_client.parser import text_string_to_metric_families

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import start_server
from omni_grpc.server.metrics_endpoint import start_metrics_endpoint
from omni_grpc.server.settings import ServerSettings
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, CANONICAL_OUTPUT_RATE_HZ, PCM16_WIDTH
from tests.server.streams import open_stream, read_until

from .conftest import speech

HISTOGRAM = "omni_grpc_speech_end_to_first_audio_seconds"


async def histogram(port: int) -> tuple[float, float]:
    """The histogram's observation count and sum in one scrape."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return samples[f"{HISTOGRAM}_count"], samples[f"{HISTOGRAM}_sum"]


async def test_the_time_from_speech_end_to_first_audio_is_observed(
    engine: EmbeddedEngine,
) -> None:
    settings = ServerSettings(
        grpc_port=0,
        engine="embedded",
        engine_options={"responder": "echo", "pace": "fast"},
    )
    server = await start_server(settings)
    metrics, port = await start_metrics_endpoint("127.0.0.1", 0)
    try:
        count_before, sum_before = await histogram(port)
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = duplex_pb2_grpc.DuplexServiceStub(channel)
            call, _ = await open_stream(stub)
            question = speech.standard_scenes()["question"].signal
            rate = CANONICAL_OUTPUT_RATE_HZ  # the client speaks OpenAI's default pcm16 rate
            # The scenes are made at the engine's canonical input rate.
            samples = soxr.resample(question, CANONICAL_INPUT_RATE_HZ, rate)
            pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
            chunk = rate * PCM16_WIDTH // 10  # 100 ms
            started = time.perf_counter()
            for seq, start in enumerate(range(0, len(pcm), chunk), start=1):
                audio = pb.AppendInputAudio(audio=pcm[start : start + chunk])
                await call.write(pb.ConverseRequest(client_seq=seq, append_input_audio=audio))
            events = await read_until(call, "response_done")
            turn_s = time.perf_counter() - started
            await call.done_writing()
        count_after, sum_after = await histogram(port)
    finally:
        await metrics.cleanup()
        await server.stop()
    kinds = [event.WhichOneof("event") for event in events]
    assert "speech_stopped" in kinds and "output_audio_delta" in kinds
    assert kinds.index("speech_stopped") < kinds.index("output_audio_delta")
    assert count_after - count_before == 1
    assert 0 < sum_after - sum_before < turn_s
