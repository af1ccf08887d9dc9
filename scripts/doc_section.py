"""A generated section of a document, between two marker comments: printed, written or checked.

The shared command line of the scripts that own a part of a doc (``scripts/dialect_map.py``,
``scripts/engine_table.py``): with no flag the section is printed, ``--write`` puts it between
the markers in place, ``--check`` exits 1 when the doc holds another one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Section:
    """Where a generated section lives and how it is made."""

    doc: Path
    begin: str
    end: str
    make: Callable[[], str]
    what: str  # what it is, for the messages: "the dialect map", "the capability table"
    script: str  # the script that writes it, relative to the repository

    def render(self, doc: str) -> str:
        """``doc`` with the section between the markers replaced by the current one."""
        try:
            head, rest = doc.split(self.begin, 1)
            _, tail = rest.split(self.end, 1)
        except ValueError:
            raise SystemExit(
                f"{self.doc.name} lacks the markers {self.begin!r} ... {self.end!r}"
            ) from None
        return f"{head}{self.begin}\n{self.make()}\n{self.end}{tail}"

    def main(self, argv: list[str] | None, description: str) -> int:
        parser = argparse.ArgumentParser(description=description)
        mode = parser.add_mutually_exclusive_group()
        name = f"docs/{self.doc.name}"
        mode.add_argument("--write", action="store_true", help=f"update {name}")
        mode.add_argument("--check", action="store_true", help=f"fail if {name} is stale")
        args = parser.parse_args(argv)
        if not (args.write or args.check):
            print(self.make())
            return 0
        current = self.doc.read_text(encoding="utf-8")
        wanted = self.render(current)
        if args.check:
            if wanted != current:
                print(
                    f"{name}: {self.what} is stale; run `python {self.script} --write`",
                    file=sys.stderr,
                )
                return 1
            return 0
        self.doc.write_text(wanted, encoding="utf-8")
        return 0
