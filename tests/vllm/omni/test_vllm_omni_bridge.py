"""The vllm-omni engine behind the real service and the websocket bridge, as a client sees it.

Runs in ``.venv-vllm-omni`` only (marked ``vllm_omni``). The service is the real gRPC service
with the ``vllm-omni`` engine; the ``DuplexOmni`` it would start is the harness's, over
vLLM-Omni's real session layer (see :mod:`.harness`), and the client is an OpenAI Realtime
websocket to the bridge.
"""

from __future__ import annotations

import base64
import collections
from collections.abc import AsyncIterator
from typing import Any

import pytest

from omni_grpc import audio
from omni_grpc.engine.vllm_omni import VllmOmniEngine
from omni_grpc.server.app import start_server
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ
from tests.bridge.testkit import realtime_socket, running_bridge, service_settings
from tests.engine.conformance import voice_like

from .test_vllm_omni import OMNI_WARNING_FILTERS, ref_audio_uri

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.vllm_omni,
    *(pytest.mark.filterwarnings(f) for f in OMNI_WARNING_FILTERS),
]
# What a stock client sends: pcm16 at 24 kHz.
CLIENT_RATE_HZ = 24000


@pytest.fixture
async def layer(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """The harness's session layer, which the service's vllm-omni engine starts instead of
    ``DuplexOmni``; the test, not the engine, shuts it down."""
    from vllm_omni.engine.duplex.session.model_channel import ModelChannel

    from .harness import start_session_layer

    started = start_session_layer()
    monkeypatch.setattr(VllmOmniEngine, "_start_omni", lambda self: started.omni)
    monkeypatch.setattr(started.omni, "shutdown", lambda *args, **kwargs: None)
    # No silence units after a listen (64 by default): a listen ends the response at once.
    monkeypatch.setattr(ModelChannel, "_AUTO_RESPONSE_MAX_CONTINUATION_UNITS", 0)
    yield started
    await started.shutdown()


@pytest.fixture
async def bridge_port(layer: Any) -> AsyncIterator[int]:
    """A bridge in front of the service running the vllm-omni engine on ``layer``."""
    options = {
        "model": "openbmb/MiniCPM-o-4_5",
        "ref_audio": ref_audio_uri(),
        "auto_response": "true",
    }
    service = await start_server(service_settings(engine="vllm-omni", engine_options=options))
    try:
        async with running_bridge(service.target) as port:
            yield port
    finally:
        await service.stop()


def client_audio(seconds: float) -> str:
    """Speech-like audio as a stock client sends it: base64 pcm16 at 24 kHz."""
    canonical = audio.decode(voice_like(seconds), pb.AUDIO_ENCODING_PCM16, CANONICAL_INPUT_RATE_HZ)
    samples = audio.resample(canonical, CANONICAL_INPUT_RATE_HZ, CLIENT_RATE_HZ)
    return base64.b64encode(audio.encode(samples, pb.AUDIO_ENCODING_PCM16, CLIENT_RATE_HZ)).decode(
        "ascii"
    )


async def test_a_listen_that_ends_a_response_reaches_the_client_as_one_done(
    layer: Any, bridge_port: int
) -> None:
    """The model speaks, then listens, which ends its response (vLLM-Omni sends
    ``response.listen`` naming it, then its ``response.done``); then it answers once more.
    Every response the client sees ends with exactly one ``response.done``."""
    async with realtime_socket(bridge_port, "model=minicpm-o&extensions=1") as ws:
        assert (await ws.recv())["type"] == "session.created"
        # A little over the one second vLLM-Omni gives the model as a unit: the service's
        # resampler holds a few samples back.
        await ws.send({"type": "input_audio_buffer.append", "audio": client_audio(1.2)})
        await layer.until_submitted(1)
        (duplex_id,) = layer.manager.runners
        layer.speak(duplex_id, "one two.", 1.0)
        await ws.until("response.output_audio.delta")
        assert layer.listen(duplex_id)
        first = (await ws.until("response.done"))[-1]["response"]
        # The next answer: everything of the first response reaches the client before it.
        layer.speak(duplex_id, "three.", 0.5, turn_end=True)
        await ws.until("response.created")
        second = await ws.until("response.done")
        assert second[-1]["response"]["id"] != first["id"]
    dones = collections.Counter(
        event["response"]["id"] for event in ws.received if event["type"] == "response.done"
    )
    assert dones == {first["id"]: 1, second[-1]["response"]["id"]: 1}
    assert first["status"] == "completed"
    assert first["output"][0]["content"][0]["transcript"] == "one two."
    listens = [event for event in ws.received if event["type"] == "response.listen"]
    assert [listen["reason"] for listen in listens] == ["model_listen"]
