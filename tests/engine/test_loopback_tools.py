"""The loopback's scripted function calls, and the kit's tool loop they run through: a call is
an output item of its response, its output waits as input, and the next response answers it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from omni_grpc.core import Limits
from omni_grpc.core.config import resolve_config
from omni_grpc.engine.kit.tools import example_value
from omni_grpc.engine.loopback import LoopbackEngine
from omni_grpc.wire import pb

from .conformance import Probe, check_lifecycles, kinds

WEATHER = pb.FunctionTool(
    name="get_weather",
    description="The weather in a city.",
    parameters_json=json.dumps(
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 2},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1},
            },
            "required": ["city", "unit"],
        }
    ),
)
CLOCK = pb.FunctionTool(name="now", description="The time.")


async def tool_probe(
    tool_call: str, choice: pb.ToolChoice.ValueType = pb.TOOL_CHOICE_MODE_AUTO, name: str = ""
) -> AsyncIterator[Probe]:
    engine = LoopbackEngine({"pace": "fast", "tool_call": tool_call})
    requested = pb.SessionConfig(
        output_modalities=[pb.MODALITY_TEXT],
        tools=pb.ToolSet(tools=[WEATHER, CLOCK]),
        tool_choice=pb.ToolChoice(mode=choice, function_name=name),
    )
    config = resolve_config(requested, Limits(), engine.features)
    probe = Probe(await engine.open_session("s1", config), 10.0)
    yield probe
    await probe.close()
    await engine.stop()


@pytest.fixture
async def auto_probe() -> AsyncIterator[Probe]:
    async for probe in tool_probe("auto"):
        yield probe


async def ask(probe: Probe, words: str) -> list[pb.ConverseResponse]:
    await probe.send(append_input_text=pb.AppendInputText(text=words))
    await probe.send(create_response=pb.CreateResponse())
    return await probe.until("response_done")


async def test_a_scripted_call_then_its_output_answered(auto_probe: Probe) -> None:
    events = await ask(auto_probe, "weather in Paris?")
    (answer,) = check_lifecycles(events).values()
    call_kinds = [k for k in kinds(answer) if k and ("function" in k or k.startswith("item_"))]
    assert call_kinds == [
        "item_added",
        *["function_call_arguments_delta"] * call_kinds.count("function_call_arguments_delta"),
        "function_call_arguments_done",
        "item_done",
    ]
    assert call_kinds.count("function_call_arguments_delta") >= 2
    added = next(e.item_added for e in answer if e.HasField("item_added"))
    done = next(
        e.function_call_arguments_done for e in answer if e.HasField("function_call_arguments_done")
    )
    deltas = "".join(
        e.function_call_arguments_delta.delta
        for e in answer
        if e.HasField("function_call_arguments_delta")
    )
    response = answer[-1].response_done.response
    assert (added.response_id, added.output_index) == (response.id, 1)
    assert done.name == "get_weather" and deltas == done.arguments
    assert json.loads(done.arguments) == {"city": "xx", "unit": "celsius", "days": 1}
    message, call = response.output
    assert message.type == pb.ITEM_TYPE_UNSPECIFIED and message.content[0].text == ""
    assert (call.type, call.call_id, call.name) == (
        pb.ITEM_TYPE_FUNCTION_CALL,
        done.call_id,
        "get_weather",
    )
    assert call.arguments == done.arguments and call.status == pb.ITEM_STATUS_COMPLETED

    output = pb.ConversationItem(
        type=pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT, call_id=call.call_id, output="sunny, 21 C"
    )
    await auto_probe.send(create_conversation_item=pb.CreateConversationItem(item=output))
    stored = (await auto_probe.until("item_done"))[-1].item_done.item
    assert (stored.type, stored.role, stored.output) == (
        pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT,
        pb.ITEM_ROLE_USER,
        "sunny, 21 C",
    )
    await auto_probe.send(create_response=pb.CreateResponse())
    (reply,) = check_lifecycles(await auto_probe.until("response_done")).values()
    said = "".join(e.output_text_delta.delta for e in reply if e.HasField("output_text_delta"))
    assert said == 'the function returned "sunny, 21 C"'
    assert len(reply[-1].response_done.response.output) == 1  # no call this time

    # The history holds the call and its output in order, for a model to read.
    await auto_probe.send(retrieve_conversation_item=pb.RetrieveConversationItem(item_id=call.id))
    retrieved = (await auto_probe.until("item_retrieved"))[-1].item_retrieved.item
    assert retrieved == call


async def test_off_answers_an_auto_choice_and_none_calls_nothing() -> None:
    async for probe in tool_probe("off"):
        (answer,) = check_lifecycles(await ask(probe, "hi")).values()
        assert "item_added" not in kinds(answer)
    async for probe in tool_probe("auto", pb.TOOL_CHOICE_MODE_NONE):
        (answer,) = check_lifecycles(await ask(probe, "hi")).values()
        assert "function_call_arguments_done" not in kinds(answer)


@pytest.mark.parametrize(
    ("choice", "name", "called"),
    [
        (pb.TOOL_CHOICE_MODE_REQUIRED, "", "get_weather"),
        (pb.TOOL_CHOICE_MODE_FUNCTION, "now", "now"),
    ],
)
async def test_a_forced_choice_calls_even_when_off(
    choice: pb.ToolChoice.ValueType, name: str, called: str
) -> None:
    async for probe in tool_probe("off", choice, name):
        events = await ask(probe, "hi")
        done = next(e for e in events if e.HasField("function_call_arguments_done"))
        assert done.function_call_arguments_done.name == called
        if called == "now":
            assert done.function_call_arguments_done.arguments == "{}"


async def test_a_responses_own_tools_and_choice_stand_in_for_the_sessions(
    auto_probe: Probe,
) -> None:
    await auto_probe.send(append_input_text=pb.AppendInputText(text="what time?"))
    own = pb.CreateResponse(
        tools=pb.ToolSet(tools=[CLOCK]),
        tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED),
    )
    await auto_probe.send(create_response=own)
    events = await auto_probe.until("response_done")
    done = next(e for e in events if e.HasField("function_call_arguments_done"))
    assert done.function_call_arguments_done.name == "now"


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"const": 3}, 3),
        ({"type": "string", "default": "d"}, "d"),
        ({"examples": ["e"]}, "e"),
        ({"anyOf": [{"type": "boolean"}, {"type": "string"}]}, True),
        ({"type": ["null", "number"], "exclusiveMinimum": 0.5}, 1.5),
        ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, [0, 0]),
        ({"type": "null"}, None),
        ("not a schema", {}),
    ],
)
def test_example_values_follow_the_schema(schema: object, value: object) -> None:
    assert example_value(schema) == value
