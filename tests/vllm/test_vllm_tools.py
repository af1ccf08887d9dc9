"""Function calls on a real vLLM (the CPU build) with the tiny random Qwen2-Audio model.

A random model writes nothing a parser would call a call, so what is checked is what the engine
guarantees whatever the model: under ``required`` or a named function vLLM's structured outputs
hold the model to the call's JSON schema, so even random weights produce a call whose arguments
validate against the tool's schema; under ``auto`` the text goes through vLLM's own tool parser
(``hermes`` here), which reads a call in the model's format and lets plain words through.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import Limits
from omni_grpc.engine.vllm import VllmEngine
from omni_grpc.engine.vllm.tool_calls import chat_tools
from omni_grpc.wire import pb
from tests.engine.conformance import Probe, check_lifecycles

from .support import VLLM_MARKS

pytestmark = VLLM_MARKS

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "hourly": {"type": "boolean"},
    },
    "required": ["city", "unit", "days", "hourly"],
    "additionalProperties": False,
}
WEATHER = pb.FunctionTool(
    name="get_weather", description="The forecast.", parameters_json=json.dumps(WEATHER_SCHEMA)
)
ALARM_SCHEMA = {
    "type": "object",
    "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23}},
    "required": ["hour"],
}
ALARM = pb.FunctionTool(
    name="set_alarm", description="Sets an alarm.", parameters_json=json.dumps(ALARM_SCHEMA)
)
SCHEMAS = {"get_weather": WEATHER_SCHEMA, "set_alarm": ALARM_SCHEMA}


async def tool_probe(engine: VllmEngine, choice: pb.ToolChoice) -> Probe:
    requested = pb.SessionConfig(
        output_modalities=[pb.MODALITY_TEXT],
        tools=pb.ToolSet(tools=[WEATHER, ALARM]),
        tool_choice=choice,
    )
    config = resolve_config(requested, Limits(), engine.features)
    return Probe(await engine.open_session("tools", config), 60.0)


async def ask(probe: Probe) -> list[pb.ConverseResponse]:
    await probe.send(append_input_text=pb.AppendInputText(text="What is the weather in Paris?"))
    await probe.send(create_response=pb.CreateResponse())
    (events,) = check_lifecycles(await probe.until("response_done")).values()
    return events


@pytest.mark.parametrize(
    "choice",
    [
        pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED),
        pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_FUNCTION, function_name="set_alarm"),
    ],
    ids=["required", "named"],
)
async def test_a_forced_call_of_the_random_model_validates_against_the_schema(
    engine: VllmEngine, choice: pb.ToolChoice
) -> None:
    probe = await tool_probe(engine, choice)
    events = await ask(probe)
    (done,) = [
        e.function_call_arguments_done for e in events if e.HasField("function_call_arguments_done")
    ]
    jsonschema.validate(json.loads(done.arguments), SCHEMAS[done.name])
    if choice.function_name:
        assert done.name == "set_alarm"
    response = events[-1].response_done.response
    assert response.status == pb.RESPONSE_STATUS_COMPLETED
    assert [item.type for item in response.output][1:] == [pb.ITEM_TYPE_FUNCTION_CALL]
    assert response.output[0].content[0].text == ""  # the call is the whole answer
    await probe.close()


async def test_auto_lets_plain_words_through_as_the_answer(engine: VllmEngine) -> None:
    probe = await tool_probe(engine, pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_AUTO))
    events = await ask(probe)
    response = events[-1].response_done.response
    assert len(response.output) == 1 and response.output[0].content[0].text
    await probe.close()


async def test_vllms_tool_parser_reads_a_call_in_the_models_format(engine: VllmEngine) -> None:
    runtime = engine.runtime
    tools = chat_tools([WEATHER, ALARM])
    text = '<tool_call>\n{"name": "set_alarm", "arguments": {"hour": 7}}\n</tool_call>'
    assert runtime.tool_calls(text, tools, "hermes") == [("set_alarm", '{"hour": 7}')]
    assert runtime.tool_calls("It is sunny.", tools, "hermes") == []
