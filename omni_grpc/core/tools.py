"""Function tools: the checks every engine relies on before a model sees a tool or a call.

A tool list and a tool choice come in a session's configuration and in one ``create_response``;
function calls and their outputs come as conversation items. What is checked here holds
whatever engine answers: the bounds of :mod:`omni_grpc.wire.bounds`, names a model can write
and a client can look up (OpenAI's pattern, each used once), a schema that is a JSON object, a
named choice that names one of the tools, and a call's item carrying what ties it to its output.
Whether a model *can* follow a schema is the engine's concern, not the core's.
"""

from __future__ import annotations

import json
import re

from omni_grpc.core.errors import CommandError
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import (
    MAX_CALL_ID_CHARS,
    MAX_FUNCTION_ARGUMENTS_CHARS,
    MAX_FUNCTION_OUTPUT_CHARS,
    MAX_TOOL_DESCRIPTION_CHARS,
    MAX_TOOL_SCHEMA_CHARS,
    MAX_TOOLS,
)

# OpenAI's function name pattern: the name a model writes back must be one a client can match.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _bad(message: str, param: str) -> CommandError:
    return CommandError("bad_event", message, param=param)


def tool_schema(tool: pb.FunctionTool) -> dict[str, object]:
    """The tool's parameter schema as an object; an empty one for a tool that declares none."""
    if not tool.parameters_json:
        return {"type": "object", "properties": {}}
    schema = json.loads(tool.parameters_json)
    if not isinstance(schema, dict):
        raise ValueError("the schema is not an object")
    return schema


def check_tools(tools: pb.ToolSet, param: str) -> None:
    """Refuses a tool list over the bounds, with a bad name, kind or schema, or a name twice."""
    if len(tools.tools) > MAX_TOOLS:
        raise _bad(f"at most {MAX_TOOLS} tools", param)
    names: set[str] = set()
    for index, tool in enumerate(tools.tools):
        at = f"{param}.{index}"
        if tool.type not in ("", "function"):
            raise _bad(f"tools of type {tool.type!r} are not served", f"{at}.type")
        if not _NAME.fullmatch(tool.name):
            raise _bad("a tool name is 1 to 64 letters, digits, '_' or '-'", f"{at}.name")
        if tool.name in names:
            raise _bad(f"tool {tool.name!r} is listed twice", f"{at}.name")
        names.add(tool.name)
        if len(tool.description) > MAX_TOOL_DESCRIPTION_CHARS:
            raise _bad(
                f"a description has at most {MAX_TOOL_DESCRIPTION_CHARS} characters",
                f"{at}.description",
            )
        if len(tool.parameters_json) > MAX_TOOL_SCHEMA_CHARS:
            raise _bad(
                f"a schema has at most {MAX_TOOL_SCHEMA_CHARS} characters", f"{at}.parameters"
            )
        try:
            tool_schema(tool)
        except ValueError as error:  # json.JSONDecodeError is a ValueError
            message = f"the parameters are not a JSON schema object: {error}"
            raise _bad(message, f"{at}.parameters") from None


def check_tool_choice(choice: pb.ToolChoice, tools: pb.ToolSet, param: str) -> None:
    """Refuses a named choice without a name, or naming no tool; a required choice without
    tools."""
    names = {tool.name for tool in tools.tools}
    if choice.mode == pb.TOOL_CHOICE_MODE_FUNCTION and choice.function_name not in names:
        raise _bad(f"tool_choice names no tool: {choice.function_name!r}", f"{param}.name")
    if choice.mode == pb.TOOL_CHOICE_MODE_REQUIRED and not names:
        raise _bad("tool_choice required needs at least one tool", param)


def check_create_tools(create: pb.CreateResponse, config: pb.SessionConfig) -> None:
    """Checks a response's own tools and choice against what the response will have."""
    if create.HasField("tools"):
        check_tools(create.tools, "tools")
    tools = create.tools if create.HasField("tools") else config.tools
    choice = create.tool_choice if create.tool_choice.mode else config.tool_choice
    check_tool_choice(choice, tools, "tool_choice")


def check_call_item(item: pb.ConversationItem, at: str = "item") -> None:
    """Refuses a function_call or function_call_output item missing what ties it, or over its
    bounds; a message passes. ``at``: where the item is, as params name it."""
    if item.type not in (pb.ITEM_TYPE_FUNCTION_CALL, pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT):
        return
    if not 0 < len(item.call_id) <= MAX_CALL_ID_CHARS:
        raise _bad(f"a call_id has 1 to {MAX_CALL_ID_CHARS} characters", f"{at}.call_id")
    if item.content:
        raise _bad("a function item has no content parts", f"{at}.content")
    if item.type == pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT:
        if len(item.output) > MAX_FUNCTION_OUTPUT_CHARS:
            raise _bad(
                f"an output has at most {MAX_FUNCTION_OUTPUT_CHARS} characters", f"{at}.output"
            )
        return
    if not _NAME.fullmatch(item.name):
        raise _bad("a function name is 1 to 64 letters, digits, '_' or '-'", f"{at}.name")
    if len(item.arguments) > MAX_FUNCTION_ARGUMENTS_CHARS:
        raise _bad(
            f"arguments have at most {MAX_FUNCTION_ARGUMENTS_CHARS} characters", f"{at}.arguments"
        )
