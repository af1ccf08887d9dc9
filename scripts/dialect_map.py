#!/usr/bin/env python3
"""Writes the map of docs/dialects.md: every contract command and event, and its JSON events in
each dialect of the bridge.

    python scripts/dialect_map.py           print the map
    python scripts/dialect_map.py --write   update docs/dialects.md in place
    python scripts/dialect_map.py --check   exit 1 if docs/dialects.md is stale

The map is not written by hand: it is what the bridge's own code does. Every client event type
a dialect accepts (its pydantic union) is decoded and translated by that dialect, with the
fewest fields the event needs, and the command it becomes is noted; every contract event (the
oneof of ``ConverseResponse``) is built with its fields filled and expanded by each dialect's
outbound side, and the JSON events it becomes are noted. So a new event, alias or rendering
changes the map, and tests/bridge/test_dialect_map.py fails until it is written again.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "dialects.md"
BEGIN = "<!-- dialect-map:begin (scripts/dialect_map.py writes this map) -->"
END = "<!-- dialect-map:end -->"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

import orjson  # noqa: E402
from doc_section import Section  # noqa: E402
from google.protobuf.descriptor import FieldDescriptor  # noqa: E402
from google.protobuf.message import Message  # noqa: E402

from bridge.dialects import OPENAI, VLLM_OMNI  # noqa: E402
from bridge.errors import DialectError  # noqa: E402
from bridge.realtime import client_events as ce  # noqa: E402
from bridge.realtime.dialect import RealtimeDialect, openai_dialect  # noqa: E402
from bridge.vllm_omni import client_events as ve  # noqa: E402
from bridge.vllm_omni.dialect import vllm_omni_dialect  # noqa: E402
from bridge.vllm_omni.inbound import SIGNALLED_EVENTS  # noqa: E402
from omni_grpc.wire import pb  # noqa: E402

# The columns of the events: (heading, dialect, whether the client asked for the extensions).
COLUMNS = (
    ("OpenAI GA (`/v1/realtime`)", OPENAI, False),
    ("OpenAI with the duplex extensions", OPENAI, True),
    ("vLLM-Omni duplex (`/v1/duplex`, `?duplex=1`)", VLLM_OMNI, True),
)
# The columns of the commands, which the extensions do not change: (heading, dialect).
COMMAND_COLUMNS = (
    ("OpenAI (`/v1/realtime`)", OPENAI),
    ("vLLM-Omni duplex (`/v1/duplex`, `?duplex=1`)", VLLM_OMNI),
)
# The value of each field an event cannot go without, by the name a client writes.
_REQUIRED = {
    "audio": "AAAA",
    "text": "hi",
    "item": {"type": "message", "role": "user", "content": []},
    "audio_end_ms": 0,
    "played_ms": 0,
    "session_id": "sess",
    "resume_token": "token",
    "server_event_seq": 0,
    "event": "barge_in",
}
# What each signalled event needs inside a turn.signal's payload.
_SIGNAL_PAYLOADS: dict[str, dict[str, Any]] = {
    "conversation.item.create": {"item": _REQUIRED["item"]},
    "conversation.item.truncate": {"item_id": "item", "audio_end_ms": 0},
}
_UNION: dict[str, Any] = {
    OPENAI: get_args(ce.ClientEvent)[0],
    VLLM_OMNI: get_args(ve.VllmOmniClientEvent)[0],
}


def _client_types(name: str) -> Iterator[tuple[str, type[Any]]]:
    for model in get_args(_UNION[name]):
        for kind in get_args(model.model_fields["type"].annotation):
            yield kind, model


def _sample(kind: str, model: type[Any]) -> dict[str, Any]:
    event: dict[str, Any] = {"type": kind}
    for field_name, info in model.model_fields.items():
        if field_name != "type" and info.is_required():
            event[field_name] = _REQUIRED[field_name]
    return event


def make_dialect(name: str, *, extensions: bool = False) -> RealtimeDialect:
    """A fresh dialect of ``name``, with both its halves in reach."""
    if name == VLLM_OMNI:
        return vllm_omni_dialect(max_audio_delta_bytes=1 << 20)
    return openai_dialect(max_audio_delta_bytes=1 << 20, extensions=extensions)


def _commands(dialect: RealtimeDialect, name: str) -> dict[str, list[str]]:
    """Contract command → the client events that become it, in the order the union lists them."""
    found: dict[str, list[str]] = {}
    inbound = dialect.inbound
    for kind, model in _client_types(name):
        event = inbound.decode(orjson.dumps(_sample(kind, model)))
        if kind == "session.update":
            opened = inbound.open_request(event, model="")
            found.setdefault(str(opened.WhichOneof("command")), []).append(
                f"`{kind}` (first event)"
            )
        if kind == "session.resume":
            resumed = inbound.resume_request(event).WhichOneof("command")
            found.setdefault(str(resumed), []).append(f"`{kind}` (first event)")
            continue  # later on a connection it is refused
        if kind in ("turn.signal", "signal_turn"):
            for signalled in sorted(SIGNALLED_EVENTS):
                payload = _SIGNAL_PAYLOADS.get(signalled, {})
                inner = {"type": kind, "event": signalled, "payload": payload}
                request = inbound.to_request(inbound.decode(orjson.dumps(inner)))
                command = str(request.WhichOneof("command"))
                found.setdefault(command, []).append(f"`{kind}` (`event: {signalled}`)")
            continue
        try:
            command = str(inbound.to_request(event).WhichOneof("command"))
        except DialectError as refused:
            raise SystemExit(f"{name}: the sample {kind} is refused: {refused}") from None
        found.setdefault(command, []).append(f"`{kind}`")
    return found


def _filled(message: Message, depth: int = 0) -> Message:
    """``message`` with every scalar and nested message set, so a rendering shows its fields."""
    for field in message.DESCRIPTOR.fields:
        if field.is_repeated:
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            nested = field.message_type
            if depth < 2 and nested and not nested.full_name.startswith("google.protobuf"):
                _filled(getattr(message, field.name), depth + 1)
        elif field.type == FieldDescriptor.TYPE_STRING:
            setattr(message, field.name, "x")
        elif field.type == FieldDescriptor.TYPE_BYTES:
            setattr(message, field.name, b"\0\0")
        elif field.type == FieldDescriptor.TYPE_ENUM:
            setattr(message, field.name, 1)
        elif field.type == FieldDescriptor.TYPE_BOOL:
            setattr(message, field.name, True)
        else:
            setattr(message, field.name, 1)
    return message


def _events(dialect: RealtimeDialect, oneof: str) -> list[str]:
    """The JSON event types one contract event becomes, in order, each once."""
    event = pb.ConverseResponse(seq=1)
    getattr(event, oneof).SetInParent()  # chosen even when it has no fields to fill
    _filled(getattr(event, oneof))
    types: list[str] = []
    for rendered in dialect.outbound.expand(event):
        if rendered["type"] not in types:
            types.append(rendered["type"])
    return types


def _dialect(name: str, extensions: bool) -> RealtimeDialect:
    dialect = make_dialect(name, extensions=extensions)
    # Most sessions open with a session.update; the map shows what that open looks like.
    update = dialect.inbound.decode(orjson.dumps({"type": "session.update", "session": {}}))
    dialect.inbound.open_request(update, model="")
    return dialect


def _cell(entries: list[str]) -> str:
    return ", ".join(entries) if entries else "—"


def _oneof(message: type[Message], name: str) -> list[str]:
    return [field.name for field in message.DESCRIPTOR.oneofs_by_name[name].fields]


def table() -> str:
    """The map, in Markdown: one table of commands, one of events."""
    commands = [_commands(make_dialect(name), name) for _, name in COMMAND_COLUMNS]
    lines = [
        "### Commands (client → service)",
        "",
        "| contract command | " + " | ".join(heading for heading, _ in COMMAND_COLUMNS) + " |",
        "| --- | " + " | ".join("---" for _ in COMMAND_COLUMNS) + " |",
    ]
    for oneof in _oneof(pb.ConverseRequest, "command"):
        cells = " | ".join(_cell(found.get(oneof, [])) for found in commands)
        lines.append(f"| `{oneof}` | {cells} |")
    heads = " | ".join(heading for heading, _, _ in COLUMNS)
    lines += ["", "### Events (service → client)", "", f"| contract event | {heads} |"]
    lines.append("| --- | " + " | ".join("---" for _ in COLUMNS) + " |")
    for oneof in _oneof(pb.ConverseResponse, "event"):
        cells = " | ".join(
            _cell([f"`{kind}`" for kind in _events(_dialect(n, ext), oneof)])
            for _, n, ext in COLUMNS
        )
        lines.append(f"| `{oneof}` | {cells} |")
    return "\n".join(lines)


SECTION = Section(DOC, BEGIN, END, table, "the dialect map", "scripts/dialect_map.py")


# ``doc`` with the map between the markers made again: what the doc's test compares.
render = SECTION.render

if __name__ == "__main__":
    sys.exit(SECTION.main(None, __doc__.split("\n\n")[0]))
