"""docs/dialects.md's map is what the bridge's code does: written again, it is the same."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from omni_grpc.wire import pb
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def load_generator() -> ModuleType:
    return load_script("dialect_map")


def test_the_dialect_map_in_the_docs_is_current() -> None:
    generator = load_generator()
    doc = (ROOT / "docs" / "dialects.md").read_text(encoding="utf-8")
    assert generator.render(doc) == doc, "run `python scripts/dialect_map.py --write`"


def test_the_map_has_a_row_for_every_command_and_event_of_the_contract() -> None:
    doc = (ROOT / "docs" / "dialects.md").read_text(encoding="utf-8")
    for message, oneof in ((pb.ConverseRequest, "command"), (pb.ConverseResponse, "event")):
        for field in message.DESCRIPTOR.oneofs_by_name[oneof].fields:
            assert f"\n| `{field.name}` |" in doc, field.name
