"""The conformance suite for engines that hear speech themselves (server VAD): a spoken turn is
detected and answered under every turn-taking setting the engine accepts, semantic detection
reports its judgement where the engine judges words, and an idle prompt comes after a silence.

Real speech (espeak-ng, as the embedded tests make it) streamed as fast as the engine takes it,
through the real detector. To put an engine under the suite, add one line to HEARING.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from omni_grpc.core import CommandError, Limits
from omni_grpc.core.config import resolve_config
from omni_grpc.engine import create_engine
from omni_grpc.engine.base import Engine
from omni_grpc.wire import pb
from tests.scripts import load_script
from tests.vllm.support import hearing_spec as vllm_hearing_spec

from .conformance import EngineSpec, Probe, check_lifecycles, kinds
from .test_conformance import TURN_TAKING

HEARING = [
    pytest.param(
        EngineSpec(
            "embedded",
            lambda: create_engine(
                "embedded", {"responder": "echo", "turn_judge": "on", "pace": "fast"}
            ),
            60.0,
        ),
        marks=[pytest.mark.model, pytest.mark.subprocess],  # its models; espeak-ng speaks
        id="embedded",
    ),
    vllm_hearing_spec(),  # runs in .venv-vllm only (marked vllm): see tests/vllm
]


speech = load_script("make_test_speech")


@pytest.fixture(params=HEARING, ids=str)
def spec(request: pytest.FixtureRequest) -> EngineSpec:
    assert isinstance(request.param, EngineSpec)
    return request.param


@pytest.fixture
async def engine(spec: EngineSpec) -> AsyncIterator[Engine]:
    built = spec.make()
    await built.start()
    yield built
    await built.stop()


async def open_hearing(engine: Engine, spec: EngineSpec, **fields: object) -> Probe | None:
    """A session with ``fields`` (default audio format: canonical 16 kHz input), or None when
    the engine refuses them typed, as the handshake says it would."""
    requested = pb.SessionConfig(**fields)  # type: ignore[arg-type]
    try:
        config = resolve_config(requested, Limits(), engine.features)
    except CommandError as refused:
        assert refused.code == "unsupported_interruption", refused
        assert not engine.features.supports_interruption_by_words
        return None
    return Probe(await engine.open_session("hearing", config), spec.timeout_s)


def question() -> bytes:
    scene = speech.Scene().pause(400).speak("what is the capital of france").pause(1500)  # type: ignore[attr-defined]
    pcm: bytes = scene.pcm16()
    return pcm


@pytest.mark.parametrize("setting", list(TURN_TAKING), ids=str)
async def test_a_spoken_turn_is_detected_and_answered_under_every_setting(
    engine: Engine, spec: EngineSpec, setting: str
) -> None:
    probe = await open_hearing(engine, spec, **TURN_TAKING[setting])
    if probe is None:
        return
    try:
        await probe.append(question(), chunk_ms=40)
        events = await probe.until("response_done")
    finally:
        await probe.close()
    order = kinds(events)
    assert order.count("input_committed") == 1
    assert order.index("speech_started") < order.index("speech_stopped")
    (answer,) = check_lifecycles(events).values()
    assert answer[-1].response_done.response.status == pb.RESPONSE_STATUS_COMPLETED
    judged = "turn_end_decision" in order
    semantic = setting.startswith("semantic") and engine.features.supports_semantic_vad
    assert judged == semantic, order
    if judged:
        assert order.index("turn_end_decision") < order.index("speech_stopped")


async def test_a_silent_user_gets_an_idle_prompt(engine: Engine, spec: EngineSpec) -> None:
    detection = pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SERVER_VAD, idle_timeout_ms=1000)
    probe = await open_hearing(engine, spec, turn_detection=detection)
    assert probe is not None
    try:
        await probe.append(question(), chunk_ms=40)
        first = (await probe.until("response_done"))[-1].response_done.response
        # The silence counts once the answer would have been heard, however long it is: the
        # user stays silent, a second at a time, until prompted.
        events: list[pb.ConverseResponse] = []
        for _ in range(60):
            await probe.append(bytes(32 * 1000), chunk_ms=40)
            events += await probe.quiet(0.05)
            if "idle_timeout_triggered" in kinds(events):
                break

        def prompted(event: pb.ConverseResponse) -> bool:
            return event.HasField("response_done") and event.response_done.response.id != first.id

        if not any(map(prompted, events)):
            events += await probe.until("response_done", prompted)
    finally:
        await probe.close()
    order = kinds(events)
    triggered = events[order.index("idle_timeout_triggered")].idle_timeout_triggered
    committed = events[order.index("input_committed")].input_committed
    assert committed.item_id == triggered.item_id
    assert triggered.audio_end_ms - triggered.audio_start_ms >= 1000
    assert order.index("idle_timeout_triggered") < order.index("response_created")
