"""Function calls as every engine makes them: which tool a response may call, the events of one
call, and example arguments for a schema.

A function call is an output item of its response, after the response's message item (output
index 0): ``item_added`` naming the response, argument deltas, ``function_call_arguments_done``,
``item_done``, and the item in ``response_done``'s output (:func:`~.answers.done_event`). The
client runs the function and adds a ``function_call_output`` item, which waits as input; its
``create_response`` answers with it.
"""

from __future__ import annotations

import json
from typing import Any

from omni_grpc.core.tools import tool_schema
from omni_grpc.engine.kit.answers import Answer, new_id
from omni_grpc.engine.kit.event_queue import EventQueue
from omni_grpc.wire import pb

# How many pieces a call's arguments stream in, at most: enough for a client to see deltas.
_ARGUMENT_PIECES = 4


def callable_tools(answer: Answer) -> list[pb.FunctionTool]:
    """The tools the response may call under its choice: none, the named one, or all."""
    mode = answer.tool_choice.mode
    if mode == pb.TOOL_CHOICE_MODE_NONE:
        return []
    tools = list(answer.tools.tools)
    if mode == pb.TOOL_CHOICE_MODE_FUNCTION:
        return [tool for tool in tools if tool.name == answer.tool_choice.function_name]
    return tools


def must_call(answer: Answer) -> bool:
    """Whether the response has to call a function (``required`` or a named function)."""
    forced = (pb.TOOL_CHOICE_MODE_REQUIRED, pb.TOOL_CHOICE_MODE_FUNCTION)
    return answer.tool_choice.mode in forced and bool(callable_tools(answer))


def answers_a_call(answer: Answer) -> bool:
    """Whether the response answers function outputs (so a scripted engine does not call
    again, but says what came back)."""
    return any(user.call_output for user in answer.inputs)


async def emit_call(events: EventQueue, answer: Answer, name: str, arguments: str) -> None:
    """Queues the events of one function call of ``answer`` and records it for its output."""
    output_index = len(answer.calls) + 1  # the message item is output 0
    item = pb.ConversationItem(
        id=new_id("item"),
        type=pb.ITEM_TYPE_FUNCTION_CALL,
        role=pb.ITEM_ROLE_ASSISTANT,
        status=pb.ITEM_STATUS_IN_PROGRESS,
        call_id=new_id("call"),
        name=name,
    )
    rid = answer.id
    added = pb.ItemAdded(item=item, response_id=rid, output_index=output_index)
    await events.put(pb.ConverseResponse(item_added=added))
    step = max(1, -(-len(arguments) // _ARGUMENT_PIECES))
    for start in range(0, len(arguments), step):
        delta = pb.FunctionCallArgumentsDelta(
            response_id=rid,
            item_id=item.id,
            call_id=item.call_id,
            delta=arguments[start : start + step],
            output_index=output_index,
        )
        await events.put(pb.ConverseResponse(function_call_arguments_delta=delta))
    done = pb.FunctionCallArgumentsDone(
        response_id=rid,
        item_id=item.id,
        call_id=item.call_id,
        name=name,
        arguments=arguments,
        output_index=output_index,
    )
    await events.put(pb.ConverseResponse(function_call_arguments_done=done))
    item.arguments = arguments
    item.status = pb.ITEM_STATUS_COMPLETED
    answer.calls.append(item)
    finished = pb.ItemDone(item=item, response_id=rid, output_index=output_index)
    await events.put(pb.ConverseResponse(item_done=finished))


def call_schema(tools: list[pb.FunctionTool]) -> dict[str, Any]:
    """The JSON schema of one call of one of ``tools``: its name, and its own arguments; what a
    constrained decoder holds a model to under a forced choice."""
    return {
        "anyOf": [
            {
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": tool_schema(tool)},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for tool in tools
        ]
    }


def example_arguments(tool: pb.FunctionTool) -> str:
    """Arguments built from the tool's schema, the same every time: a scripted call's. They
    follow its types, consts, enums, properties, lengths and minimums, not patterns or formats."""
    return json.dumps(example_value(tool_schema(tool)), separators=(",", ":"))


def example_value(schema: Any) -> Any:
    """A value of ``schema``'s type: its const, first enum value, default or example, else one
    built from the type (every property of an object, the fewest items a list may have)."""
    if not isinstance(schema, dict):
        return {}
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    for key in ("enum", "examples"):
        if schema.get(key):
            return schema[key][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return example_value(schema[key][0])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: example_value(sub) for name, sub in properties.items()}
    if kind == "array":
        return [example_value(schema.get("items", {})) for _ in range(schema.get("minItems", 0))]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        return int(low) if kind == "integer" else float(low)
    if kind == "boolean":
        return True
    if kind == "string":
        return "x" * max(1, schema.get("minLength", 0))
    return None


def scripted_tool(answer: Answer, *, on_auto: bool) -> pb.FunctionTool | None:
    """The tool a scripted engine calls for ``answer``, or None to answer instead: the first it
    may call when the choice forces a call, or under ``auto`` when ``on_auto``; never when the
    response answers function outputs (the call was made; now its result is said)."""
    tools = callable_tools(answer)
    if answers_a_call(answer) or not tools:
        return None
    return tools[0] if must_call(answer) or on_auto else None
