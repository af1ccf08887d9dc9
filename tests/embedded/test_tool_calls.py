"""The embedded engine's function calls: SmolLM2 proposing them under ``auto``, llguidance
forcing schema-valid arguments, and the echo responder's scripted calls."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

from omni_grpc.engine.embedded.models.lm import SmolLM, find_smollm2
from omni_grpc.engine.embedded.tool_calls import CallWriter, choose_call
from omni_grpc.engine.kit import Answer, UserInput
from omni_grpc.wire import pb

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
WEATHER = pb.FunctionTool(
    name="get_weather",
    description="The weather forecast for a city.",
    parameters_json=json.dumps(WEATHER_SCHEMA),
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


@pytest.fixture(scope="module")
def writer() -> CallWriter:
    return CallWriter(SmolLM(find_smollm2()))


def answer(mode: pb.ToolChoiceMode.ValueType, name: str = "", *tools: pb.FunctionTool) -> Answer:
    return Answer(
        id="resp_1",
        item_id="item_1",
        turn_started=0.0,
        modalities=(pb.MODALITY_TEXT,),
        tools=pb.ToolSet(tools=list(tools) or [WEATHER, ALARM]),
        tool_choice=pb.ToolChoice(mode=mode, function_name=name),
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "question",
    [
        "What will the weather be in Paris for the next three days?",
        "Wake me up at seven.",
        "Tell me a joke.",  # nothing to call: the grammar still forces a valid call
    ],
)
def test_required_calls_validate_against_their_schema(writer: CallWriter, question: str) -> None:
    call = writer.write([("user", question)], [WEATHER, ALARM], seed=1)
    assert call is not None
    name, arguments = call
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


@pytest.mark.slow
def test_the_model_picks_the_tool_and_fills_what_was_said(writer: CallWriter) -> None:
    call = writer.write([("user", "What is the weather in Paris?")], [WEATHER, ALARM], seed=1)
    assert call is not None
    name, arguments = call
    assert name == "get_weather" and json.loads(arguments)["city"] == "Paris"


@pytest.mark.slow
def test_auto_proposes_a_call_for_a_question_a_tool_answers(writer: CallWriter) -> None:
    assert writer.proposes([("user", "What is the weather in Paris?")], [WEATHER])
    assert not writer.proposes([("user", "Tell me a joke.")], [WEATHER])


@pytest.mark.slow
async def test_choose_call_follows_the_tool_choice(writer: CallWriter) -> None:
    turns = [("user", "Tell me a joke.")]
    with ThreadPoolExecutor(1) as executor:

        async def chosen(made: Answer) -> tuple[str, str] | None:
            return await choose_call(made, writer, turns, executor, seed=1)

        named = await chosen(answer(pb.TOOL_CHOICE_MODE_FUNCTION, "set_alarm"))
        assert named is not None and named[0] == "set_alarm"
        assert await chosen(answer(pb.TOOL_CHOICE_MODE_NONE)) is None
        assert await chosen(answer(pb.TOOL_CHOICE_MODE_AUTO)) is None  # not proposed
        answering = answer(pb.TOOL_CHOICE_MODE_AUTO)
        answering.inputs.append(UserInput("item_0", text="sunny", call_output=True))
        assert await chosen(answering) is None  # it answers the output instead


async def test_the_scripted_responder_calls_the_first_tool_with_schema_built_arguments() -> None:
    with ThreadPoolExecutor(1) as executor:  # not used: no model runs
        call = await choose_call(answer(pb.TOOL_CHOICE_MODE_AUTO), None, [], executor, seed=1)
        assert call == ("get_weather", '{"city":"x","unit":"celsius","days":1}')
        jsonschema.validate(json.loads(call[1]), WEATHER_SCHEMA)
        none = await choose_call(answer(pb.TOOL_CHOICE_MODE_NONE), None, [], executor, seed=1)
        assert none is None


@pytest.mark.slow
def test_a_cancelled_call_stops_the_model_and_makes_no_call(writer: CallWriter) -> None:
    turns = [("user", "What is the weather in Paris?")]
    assert writer.write(turns, [WEATHER], seed=1, cancelled=lambda: True) is None
