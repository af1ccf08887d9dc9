"""The engine conformance suite: every engine behind the seam passes every test here.

To put an engine under the suite, add one line to ENGINES. Engines are driven directly:
open_session, submit, events, close; no server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import jsonschema
import pytest

from omni_grpc.core import CommandError, Limits
from omni_grpc.core.commands import engine_command
from omni_grpc.core.config import resolve_config
from omni_grpc.engine import create_engine
from omni_grpc.engine.base import Engine
from omni_grpc.engine.loopback import LoopbackEngine
from omni_grpc.wire import pb
from tests.vllm.support import conformance_spec as vllm_conformance_spec

from .conformance import (
    EngineSpec,
    Probe,
    ScheduleClock,
    audio_ms,
    cancel_mid_response,
    check_lifecycles,
    kinds,
    open_probe,
    run_turn,
    transcript,
    voice_like,
)

# The loopback paces its answers in real time on a clock of the test's, on which waiting costs
# nothing: its schedule is kept, and how long it took is read on that clock.
LOOPBACK_CLOCK = ScheduleClock()
ENGINES = [
    EngineSpec(
        "loopback",
        lambda: LoopbackEngine({"pace": "realtime"}, clock=LOOPBACK_CLOCK),
        clock=LOOPBACK_CLOCK,
    ),
    pytest.param(
        EngineSpec(
            "embedded",
            lambda: create_engine("embedded", {"responder": "echo", "server_vad": "off"}),
            30.0,
        ),
        marks=[pytest.mark.model, pytest.mark.subprocess],  # its models; espeak-ng speaks
        id="embedded",
    ),
    vllm_conformance_spec(),  # runs in .venv-vllm only (marked vllm): see tests/vllm
]


@pytest.fixture(params=ENGINES, ids=str)
def spec(request: pytest.FixtureRequest) -> EngineSpec:
    assert isinstance(request.param, EngineSpec)
    return request.param


@pytest.fixture
async def engine(spec: EngineSpec) -> AsyncIterator[Engine]:
    built = spec.make()
    await built.start()
    yield built
    await built.stop()


@pytest.fixture
async def probe(engine: Engine, spec: EngineSpec) -> AsyncIterator[Probe]:
    opened = await open_probe(engine, spec)
    yield opened
    await opened.close()


def error_of(event: pb.ConverseResponse) -> tuple[str, int]:
    assert event.HasField("error"), f"expected an error, got {event.WhichOneof('event')}"
    return event.error.code, event.error.client_seq


async def test_a_committed_turn_is_announced_then_answered(probe: Probe) -> None:
    events = await run_turn(probe, 1.0)
    order = kinds(events)
    committed = events[order.index("input_committed")].input_committed
    assert committed.item_id
    assert committed.audio_duration_ms == pytest.approx(1000.0)
    user_items = [e.item_done.item for e in events if e.HasField("item_done")]
    assert [item.id for item in user_items] == [committed.item_id]
    assert user_items[0].role == pb.ITEM_ROLE_USER
    assert order.index("input_committed") < order.index("response_created")

    (answer,) = check_lifecycles(events).values()
    done = answer[-1].response_done.response
    assert done.status == pb.RESPONSE_STATUS_COMPLETED
    assert audio_ms(answer) > 0
    assert done.usage.output_audio_ms == pytest.approx(audio_ms(answer))
    assert done.usage.input_audio_ms == pytest.approx(1000.0)
    (item,) = done.output
    assert item.role == pb.ITEM_ROLE_ASSISTANT
    assert item.id == answer[0].response_created.item_id
    assert item.content[0].transcript == transcript(answer)
    assert 0 < done.latency.first_audio_ms <= done.latency.total_ms


async def test_a_commit_may_hold_the_answer_until_create_response(probe: Probe) -> None:
    await probe.append(voice_like(0.5))
    await probe.send(commit_input_audio=pb.CommitInputAudio(create_response=False))
    await probe.until("input_committed")
    assert "response_created" not in kinds(await probe.quiet(0.3))

    await probe.send(create_response=pb.CreateResponse())
    events = await probe.until("response_done")
    (answer,) = check_lifecycles(events).values()
    assert answer[-1].response_done.response.status == pb.RESPONSE_STATUS_COMPLETED


async def test_create_response_needs_committed_input(probe: Probe) -> None:
    seq = await probe.send(create_response=pb.CreateResponse())
    assert error_of(await probe.next()) == ("response_create_without_input", seq)

    # Cleared input is not committed input either.
    await probe.append(voice_like(0.3))
    await probe.send(clear_input_audio=pb.ClearInputAudio())
    await probe.until("input_cleared")
    seq = await probe.send(create_response=pb.CreateResponse())
    assert error_of(await probe.next()) == ("response_create_without_input", seq)


async def test_only_one_response_runs_at_a_time(probe: Probe) -> None:
    await probe.append(voice_like(20.0), chunk_ms=200)
    await probe.send(commit_input_audio=pb.CommitInputAudio(create_response=False))
    await probe.send(append_input_text=pb.AppendInputText(text="and another thing"))
    await probe.send(create_response=pb.CreateResponse())
    await probe.until("response_created")
    seq = await probe.send(create_response=pb.CreateResponse())
    refused = await probe.until("error")
    assert error_of(refused[-1]) == ("response_already_active", seq)
    await probe.send(cancel_response=pb.CancelResponse())
    events = await probe.until("response_done")
    assert len(check_lifecycles(probe.seen)) == 1
    assert events[-1].response_done.response.status == pb.RESPONSE_STATUS_CANCELLED


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ({"cancel_response": pb.CancelResponse()}, "client_cancelled"),
        ({"barge_in": pb.BargeIn()}, "barge_in"),
        ({"cancel_input": pb.CancelInput()}, "barge_in"),
        ({"clear_output_audio": pb.ClearOutputAudio()}, "output_audio_cleared"),
    ],
    ids=["cancel_response", "barge_in", "cancel_input", "clear_output_audio"],
)
async def test_an_interruption_ends_the_response_at_once(
    probe: Probe, command: dict[str, object], reason: str
) -> None:
    events, done, took_s = await cancel_mid_response(probe, lambda: probe.send(**command))
    assert took_s < 0.5  # on the engine's clock where the test gives it one

    assert done.status == pb.RESPONSE_STATUS_CANCELLED
    assert done.status_reason == reason
    (answer,) = check_lifecycles(events).values()
    # The done reports what was delivered: the audio and text that came before it.
    assert 0 < done.usage.output_audio_ms == pytest.approx(audio_ms(answer))
    assert done.usage.output_audio_ms < 20_000
    assert done.output[0].content[0].transcript == transcript(answer)
    if reason == "output_audio_cleared":
        order = kinds(events)
        assert order.index("output_audio_cleared") < order.index("response_done")
    after = await probe.quiet(0.3)
    assert not [e for e in after if e.WhichOneof("event") != "input_cleared"], kinds(after)
    check_lifecycles(probe.seen)


@pytest.mark.parametrize(
    "command",
    [{"cancel_response": pb.CancelResponse()}, {"barge_in": pb.BargeIn()}],
    ids=["cancel_response", "barge_in"],
)
async def test_an_interruption_with_nothing_running_is_refused(
    probe: Probe, command: dict[str, object]
) -> None:
    seq = await probe.send(**command)
    assert error_of(await probe.next()) == ("response_not_active", seq)
    await run_turn(probe, 0.3)  # and after a finished response too
    seq = await probe.send(**command)
    assert error_of(await probe.next()) == ("response_not_active", seq)


async def test_playback_is_acknowledged(probe: Probe) -> None:
    events = await run_turn(probe, 1.0)
    done = events[-1].response_done.response
    await probe.send(ack_playback=pb.AckPlayback(played_ms=400.0, response_id=done.id))
    ack = (await probe.until("playback_acknowledged"))[-1].playback_acknowledged
    assert (ack.response_id, ack.item_id) == (done.id, done.output[0].id)
    assert (ack.played_ms, ack.committed_ms) == (400.0, 400.0)

    seq = await probe.send(ack_playback=pb.AckPlayback(played_ms=10.0, response_id="resp_nope"))
    assert error_of(await probe.next()) == ("playback_item_not_found", seq)


async def test_items_can_be_retrieved_and_deleted(probe: Probe, engine: Engine) -> None:
    events = await run_turn(probe, 0.4)
    user_item = next(e.item_done.item for e in events if e.HasField("item_done"))
    await probe.send(retrieve_conversation_item=pb.RetrieveConversationItem(item_id=user_item.id))
    retrieved = (await probe.until("item_retrieved"))[-1].item_retrieved.item
    # The item as it was, with the turn's audio where the engine keeps it (canonical input).
    kept = retrieved.content[0].audio
    if engine.features.item_audio_kept_ms:
        assert kept == voice_like(0.4)
    else:
        assert not kept
    retrieved.content[0].ClearField("audio")
    assert retrieved == user_item

    await probe.send(delete_conversation_item=pb.DeleteConversationItem(item_id=user_item.id))
    assert (await probe.until("item_deleted"))[-1].item_deleted.item_id == user_item.id
    seq = await probe.send(
        retrieve_conversation_item=pb.RetrieveConversationItem(item_id=user_item.id)
    )
    assert error_of(await probe.next()) == ("item_not_found", seq)


async def test_close_mid_response_stops_everything(engine: Engine, spec: EngineSpec) -> None:
    before = asyncio.all_tasks()
    probe = await open_probe(engine, spec)
    await probe.append(voice_like(20.0), chunk_ms=200)
    await probe.send(commit_input_audio=pb.CommitInputAudio())
    await probe.until("output_audio_delta")

    await probe.session.close()
    delivered = probe.delivered
    await probe.stream_end()
    assert probe.delivered == delivered, "events came after close"
    await probe.session.close()  # idempotent
    await probe.session.submit(
        engine_command(pb.ConverseRequest(client_seq=99, barge_in=pb.BargeIn()))
    )
    assert probe.failure is None
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - before == set()


async def test_two_sessions_do_not_mix(engine: Engine, spec: EngineSpec) -> None:
    first, second = await open_probe(engine, spec, "a"), await open_probe(engine, spec, "b")
    try:
        short, long = await asyncio.gather(run_turn(first, 0.5), run_turn(second, 1.5))
    finally:
        await first.close()
        await second.close()
    short_done = short[-1].response_done.response
    long_done = long[-1].response_done.response
    assert short_done.id != long_done.id
    assert short_done.usage.input_audio_ms == pytest.approx(500.0)
    assert long_done.usage.input_audio_ms == pytest.approx(1500.0)
    assert set(check_lifecycles(first.seen)) == {short_done.id}
    assert set(check_lifecycles(second.seen)) == {long_done.id}


# A schema even a random model under a grammar finishes: a bounded string, an enum, a range.
FORECAST = pb.FunctionTool(
    name="get_weather",
    description="The forecast for a city.",
    parameters_json=json.dumps(
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit", "days"],
            "additionalProperties": False,
        }
    ),
)


async def test_a_forced_call_is_an_output_item_and_its_output_is_answered(probe: Probe) -> None:
    text_only = [pb.MODALITY_TEXT]
    await probe.send(append_input_text=pb.AppendInputText(text="What is the weather in Paris?"))
    forced = pb.CreateResponse(
        output_modalities=text_only,
        tools=pb.ToolSet(tools=[FORECAST]),
        tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED),
    )
    await probe.send(create_response=forced)
    (events,) = check_lifecycles(await probe.until("response_done")).values()
    (done,) = [
        e.function_call_arguments_done for e in events if e.HasField("function_call_arguments_done")
    ]
    assert done.name == "get_weather"
    jsonschema.validate(json.loads(done.arguments), json.loads(FORECAST.parameters_json))
    response = events[-1].response_done.response
    call = response.output[1]
    assert (call.type, call.call_id, call.arguments) == (
        pb.ITEM_TYPE_FUNCTION_CALL,
        done.call_id,
        done.arguments,
    )

    output = pb.ConversationItem(
        type=pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT, call_id=call.call_id, output="sunny"
    )
    await probe.send(create_conversation_item=pb.CreateConversationItem(item=output))
    await probe.send(create_response=pb.CreateResponse(output_modalities=text_only))
    (reply,) = check_lifecycles(await probe.until("response_done")).values()
    answered = reply[-1].response_done.response
    assert answered.id != response.id and len(answered.output) == 1  # words, no call
    assert answered.output[0].content[0].text


# Each turn-taking setting of the contract (issue 23), as a session asks for it on open.
TURN_TAKING = {
    "semantic auto": {
        "turn_detection": pb.TurnDetection(
            type=pb.TURN_DETECTION_TYPE_SEMANTIC_VAD, eagerness=pb.EAGERNESS_AUTO
        )
    },
    "semantic high": {
        "turn_detection": pb.TurnDetection(
            type=pb.TURN_DETECTION_TYPE_SEMANTIC_VAD, eagerness=pb.EAGERNESS_HIGH
        )
    },
    "idle timeout": {"turn_detection": pb.TurnDetection(idle_timeout_ms=5000)},
    "interruption by words": {
        "interruption": pb.InterruptionConfig(mode=pb.INTERRUPTION_MODE_WORDS, min_words=2)
    },
    "interruption resumes": {"interruption": pb.InterruptionConfig(resume_false_interruption=True)},
    "interruption min duration": {"interruption": pb.InterruptionConfig(min_duration_ms=400)},
}


@pytest.mark.parametrize("setting", list(TURN_TAKING), ids=str)
async def test_every_turn_taking_setting_is_honoured_or_refused_typed(
    engine: Engine, spec: EngineSpec, setting: str
) -> None:
    features = engine.features
    requested = pb.SessionConfig(**TURN_TAKING[setting])  # type: ignore[arg-type]
    try:
        config = resolve_config(requested, Limits(), features)
    except CommandError as refused:
        # Refused only for what the handshake says the engine lacks, with a typed code.
        assert refused.code in ("unsupported_turn_detection", "unsupported_interruption")
        assert not features.supports_server_vad or (
            setting == "interruption by words" and not features.supports_interruption_by_words
        )
        return
    semantic = config.turn_detection.type == pb.TURN_DETECTION_TYPE_SEMANTIC_VAD
    assert semantic == (setting.startswith("semantic") and features.supports_semantic_vad)
    probe = Probe(await engine.open_session("turns", config), spec.timeout_s)
    try:
        events = await run_turn(probe, 0.5)  # a committed turn is answered under any of them
    finally:
        await probe.close()
    (answer,) = check_lifecycles(events).values()
    assert answer[-1].response_done.response.status == pb.RESPONSE_STATUS_COMPLETED
