"""Function tools in the core: tool lists and choices in a configuration and in one response,
function call items, their bounds, and how an update replaces them."""

from __future__ import annotations

import json

import pytest

from omni_grpc.core import CommandError
from omni_grpc.core.config import merge_config, resolve_config
from omni_grpc.core.tools import check_call_item, check_tools, tool_schema
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import (
    MAX_FUNCTION_ARGUMENTS_CHARS,
    MAX_FUNCTION_OUTPUT_CHARS,
    MAX_TOOL_DESCRIPTION_CHARS,
    MAX_TOOL_SCHEMA_CHARS,
    MAX_TOOLS,
)

from .helpers import ENGINE, LIMITS, cmd, decode, handed, open_session, requests, text

WEATHER_SCHEMA = json.dumps(
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
)


def tool(name: str = "get_weather", **fields: str) -> pb.FunctionTool:
    return pb.FunctionTool(name=name, **{"parameters_json": WEATHER_SCHEMA, **fields})


def toolset(*tools: pb.FunctionTool) -> pb.ToolSet:
    return pb.ToolSet(tools=list(tools))


def refusal(call: object) -> tuple[str, str]:
    assert isinstance(call, CommandError)
    return call.code, call.param


# -- tool lists ---------------------------------------------------------------------------


def test_a_tool_without_parameters_has_an_empty_object_schema() -> None:
    assert tool_schema(pb.FunctionTool(name="now")) == {"type": "object", "properties": {}}
    assert tool_schema(tool())["required"] == ["city"]


BAD_TOOLS: list[tuple[pb.ToolSet, str]] = [
    (toolset(*[tool(f"t{i}") for i in range(MAX_TOOLS + 1)]), "tools"),
    (toolset(tool(type="file_search")), "tools.0.type"),
    (toolset(tool("")), "tools.0.name"),
    (toolset(tool("has space")), "tools.0.name"),
    (toolset(tool("x" * 65)), "tools.0.name"),
    (toolset(tool(), tool()), "tools.1.name"),
    (toolset(tool(description="d" * (MAX_TOOL_DESCRIPTION_CHARS + 1))), "tools.0.description"),
    (toolset(tool(parameters_json=" " * (MAX_TOOL_SCHEMA_CHARS + 1))), "tools.0.parameters"),
    (toolset(tool(parameters_json="{not json")), "tools.0.parameters"),
    (toolset(tool(parameters_json="[1, 2]")), "tools.0.parameters"),
]


@pytest.mark.parametrize(("tools", "param"), BAD_TOOLS)
def test_bad_tool_lists_are_refused_naming_the_field(tools: pb.ToolSet, param: str) -> None:
    with pytest.raises(CommandError) as raised:
        check_tools(tools, "tools")
    assert (raised.value.code, raised.value.param) == ("bad_event", param)


def test_tools_at_their_bounds_are_accepted() -> None:
    names = [f"t{i}" for i in range(MAX_TOOLS - 1)] + ["x" * 64]
    check_tools(toolset(*[tool(name, type="function") for name in names]), "tools")
    padded = WEATHER_SCHEMA.ljust(MAX_TOOL_SCHEMA_CHARS)
    check_tools(toolset(tool(parameters_json=padded, description="d" * 8192)), "tools")


# -- tool choice, in a configuration and an update ------------------------------------------


def test_a_config_defaults_to_auto_and_keeps_its_tools() -> None:
    config = resolve_config(pb.SessionConfig(tools=toolset(tool())), LIMITS, ENGINE)
    assert config.tool_choice == pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_AUTO)
    assert [t.name for t in config.tools.tools] == ["get_weather"]


@pytest.mark.parametrize(
    ("config", "param"),
    [
        (pb.SessionConfig(tools=toolset(tool(""))), "tools.0.name"),
        (
            pb.SessionConfig(
                tools=toolset(tool()),
                tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_FUNCTION, function_name="x"),
            ),
            "tool_choice.name",
        ),
        (
            pb.SessionConfig(tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED)),
            "tool_choice",
        ),
    ],
    ids=["bad-tool", "named-unknown", "required-without-tools"],
)
def test_a_config_with_bad_tools_or_choice_is_refused(config: pb.SessionConfig, param: str) -> None:
    with pytest.raises(CommandError) as raised:
        resolve_config(config, LIMITS, ENGINE)
    assert (raised.value.code, raised.value.param) == ("bad_event", param)


def test_an_update_replaces_tools_and_choice_whole_and_an_empty_set_clears() -> None:
    named = pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_FUNCTION, function_name="get_weather")
    current = resolve_config(
        pb.SessionConfig(tools=toolset(tool(), tool("now")), tool_choice=named), LIMITS, ENGINE
    )
    kept = merge_config(current, pb.SessionConfig(instructions="x"), LIMITS, ENGINE)
    assert kept.tools == current.tools and kept.tool_choice == named
    fewer = merge_config(
        current,
        pb.SessionConfig(
            tools=toolset(tool("now")), tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_NONE)
        ),
        LIMITS,
        ENGINE,
    )
    assert [t.name for t in fewer.tools.tools] == ["now"]
    assert fewer.tool_choice == pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_NONE)  # the name went
    cleared = pb.SessionConfig(tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_AUTO))
    cleared.tools.SetInParent()
    assert len(merge_config(current, cleared, LIMITS, ENGINE).tools.tools) == 0


# -- per response ---------------------------------------------------------------------------


def create(**fields: object) -> pb.ConverseRequest:
    return cmd(2, create_response=pb.CreateResponse(**fields))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("request_", "passes"),
    [
        (create(tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED)), True),
        (
            create(tools=toolset(), tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED)),
            False,
        ),
        (
            create(
                tools=toolset(tool("now")), tool_choice=pb.ToolChoice(mode=4, function_name="now")
            ),
            True,
        ),
        (create(tool_choice=pb.ToolChoice(mode=4, function_name="now")), False),
        (create(tools=toolset(tool(""))), False),
    ],
    ids=["session-tools", "own-empty-tools", "own-named", "named-not-in-session", "bad-own-tool"],
)
def test_a_response_is_checked_against_its_own_or_the_sessions_tools(
    request_: pb.ConverseRequest, passes: bool
) -> None:
    s = open_session(config=pb.SessionConfig(tools=toolset(tool()))).session
    s.receive(1, text(1), now=0.0)
    effects = s.receive(1, request_, now=0.0)
    assert (requests(effects) == [handed(request_)]) is passes
    errors = [event.error for event in decode(effects) if event.HasField("error")]
    assert [error.code for error in errors] == ([] if passes else ["bad_event"])


# -- function call items ---------------------------------------------------------------------


def call_item(**fields: object) -> pb.ConversationItem:
    base: dict[str, object] = {
        "type": pb.ITEM_TYPE_FUNCTION_CALL,
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    return pb.ConversationItem(**{**base, **fields})  # type: ignore[arg-type]


def output_item(**fields: object) -> pb.ConversationItem:
    base: dict[str, object] = {
        "type": pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT,
        "call_id": "call_1",
        "output": "sunny",
    }
    return pb.ConversationItem(**{**base, **fields})  # type: ignore[arg-type]


GOOD_ITEMS = [
    pb.ConversationItem(content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text="hi")]),
    call_item(),
    call_item(arguments="a" * MAX_FUNCTION_ARGUMENTS_CHARS),
    output_item(),
    output_item(output="o" * MAX_FUNCTION_OUTPUT_CHARS),
]
BAD_ITEMS: list[tuple[pb.ConversationItem, str]] = [
    (call_item(call_id=""), "item.call_id"),
    (output_item(call_id="c" * 129), "item.call_id"),
    (output_item(content=[pb.ContentPart(text="x")]), "item.content"),
    (output_item(output="o" * (MAX_FUNCTION_OUTPUT_CHARS + 1)), "item.output"),
    (call_item(name=""), "item.name"),
    (call_item(arguments="a" * (MAX_FUNCTION_ARGUMENTS_CHARS + 1)), "item.arguments"),
]


@pytest.mark.parametrize("item", GOOD_ITEMS)
def test_messages_and_well_formed_call_items_pass(item: pb.ConversationItem) -> None:
    check_call_item(item)


@pytest.mark.parametrize(("item", "param"), BAD_ITEMS)
def test_call_items_missing_their_tie_or_over_bounds_are_refused(
    item: pb.ConversationItem, param: str
) -> None:
    s = open_session().session
    request = cmd(1, create_conversation_item=pb.CreateConversationItem(item=item))
    effects = s.receive(1, request, now=0.0)
    assert requests(effects) == []
    [event] = decode(effects)
    assert (event.error.code, event.error.param) == ("bad_event", param)
