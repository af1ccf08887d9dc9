"""Function tools in the Realtime dialect, both ways: the tool fields and call items a client
sends, and the function call events a response makes.

Inbound, ``session.tools`` / ``response.tools`` become a ``pb.ToolSet`` (the schema passed on as
JSON text), ``tool_choice`` a ``pb.ToolChoice``, and ``conversation.item.create`` of a
``function_call`` or ``function_call_output`` a call item. The core checks names, bounds and
the choice against the tools, for gRPC clients too; here only what the dialect alone can say
is refused (a tool kind the contract has no field for).

Outbound, a function call is an output item of its response, rendered as OpenAI's server
does::

    item_added (with response_id)   → response.output_item.added, conversation.item.added
    function_call_arguments_delta   → response.function_call_arguments.delta
    function_call_arguments_done    → response.function_call_arguments.done
    item_done (with response_id)    → response.output_item.done, conversation.item.done

and the call item sits in ``response.done``'s output after the message.
"""

from __future__ import annotations

import orjson

from bridge.dialect import Event
from bridge.errors import DialectError
from bridge.realtime.tool_models import ToolChoiceJson, ToolChoiceSpec, ToolJson
from omni_grpc.wire import pb
from omni_grpc.wire.names import ITEM_STATUSES

CALL_ITEM_TYPES = frozenset({pb.ITEM_TYPE_FUNCTION_CALL, pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT})
_CHOICE_MODES = {
    "auto": pb.TOOL_CHOICE_MODE_AUTO,
    "none": pb.TOOL_CHOICE_MODE_NONE,
    "required": pb.TOOL_CHOICE_MODE_REQUIRED,
}
_CHOICE_NAMES = {mode: name for name, mode in _CHOICE_MODES.items()}
ITEM_STATUS_NAMES = {status: name for name, status in ITEM_STATUSES.items()}


# -- inbound ------------------------------------------------------------------------------


def toolset(tools: list[ToolJson], param: str) -> pb.ToolSet:
    """Translates a tool list; a tool that is not a function is refused naming it."""
    out = pb.ToolSet()
    for index, tool in enumerate(tools):
        if tool.type != "function":
            raise DialectError(
                "bad_event",
                f"tools of type {tool.type!r} are not served; only function tools",
                param=f"{param}.{index}.type",
            )
        schema = "" if tool.parameters is None else orjson.dumps(tool.parameters).decode()
        out.tools.add(
            type="function", name=tool.name, description=tool.description, parameters_json=schema
        )
    return out


def tool_choice(spec: ToolChoiceSpec, param: str) -> pb.ToolChoice:
    """Translates ``tool_choice``; a choice of another kind of tool is refused naming it."""
    if not isinstance(spec, ToolChoiceJson):
        return pb.ToolChoice(mode=_CHOICE_MODES[spec])
    if spec.type != "function":
        raise DialectError(
            "bad_event",
            f"tool_choice of type {spec.type!r} is not served; only functions",
            param=f"{param}.type",
        )
    return pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_FUNCTION, function_name=spec.name)


def call_item(
    kind: str,
    item_id: str,
    call_id: str | None,
    name: str | None,
    arguments: str | None,
    output: str | None,
) -> pb.ConversationItem:
    """A ``function_call`` or ``function_call_output`` item a client creates."""
    if kind == "function_call":
        return pb.ConversationItem(
            id=item_id,
            type=pb.ITEM_TYPE_FUNCTION_CALL,
            call_id=call_id or "",
            name=name or "",
            arguments=arguments or "",
        )
    return pb.ConversationItem(
        id=item_id,
        type=pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT,
        call_id=call_id or "",
        output=output or "",
    )


# -- outbound -----------------------------------------------------------------------------


def session_tools_json(config: pb.SessionConfig) -> Event:
    """The ``tools`` and ``tool_choice`` of a session (or a response's own)."""
    return {"tools": tools_json(config.tools), "tool_choice": tool_choice_json(config.tool_choice)}


def tools_json(tools: pb.ToolSet) -> list[Event]:
    """Each tool in the GA function tool shape."""
    return [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": orjson.loads(tool.parameters_json) if tool.parameters_json else {},
        }
        for tool in tools.tools
    ]


def tool_choice_json(choice: pb.ToolChoice) -> str | Event:
    """A choice as GA spells it: a mode's name, or the function named."""
    if choice.mode == pb.TOOL_CHOICE_MODE_FUNCTION:
        return {"type": "function", "name": choice.function_name}
    return _CHOICE_NAMES.get(choice.mode, "auto")


def call_item_json(item: pb.ConversationItem) -> Event:
    """A function call or its output as a Realtime item."""
    out: Event = {"id": item.id, "object": "realtime.item", "call_id": item.call_id}
    if item.type == pb.ITEM_TYPE_FUNCTION_CALL:
        out.update(type="function_call", name=item.name, arguments=item.arguments)
    else:
        out.update(type="function_call_output", output=item.output)
    if item.status in ITEM_STATUS_NAMES:
        out["status"] = ITEM_STATUS_NAMES[item.status]
    return out


def call_item_events(stage: str, e: pb.ItemAdded | pb.ItemDone) -> list[Event]:
    """The response's events for a function call item it added or finished (``stage``:
    ``added`` or ``done``)."""
    item = call_item_json(e.item)
    return [
        {
            "type": f"response.output_item.{stage}",
            "response_id": e.response_id,
            "output_index": e.output_index,
            "item": item,
        },
        {
            "type": f"conversation.item.{stage}",
            "item": item,
            "previous_item_id": e.previous_item_id or None,
        },
    ]


def arguments_delta(e: pb.FunctionCallArgumentsDelta) -> list[Event]:
    """A piece of a call's arguments."""
    return [
        {
            "type": "response.function_call_arguments.delta",
            "response_id": e.response_id,
            "item_id": e.item_id,
            "output_index": e.output_index,
            "call_id": e.call_id,
            "delta": e.delta,
        }
    ]


def arguments_done(e: pb.FunctionCallArgumentsDone) -> list[Event]:
    """A call's whole arguments."""
    return [
        {
            "type": "response.function_call_arguments.done",
            "response_id": e.response_id,
            "item_id": e.item_id,
            "output_index": e.output_index,
            "call_id": e.call_id,
            "name": e.name,
            "arguments": e.arguments,
        }
    ]
