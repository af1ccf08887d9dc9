"""A recording's ``manifest.json``: read, changed and written back in place, under a lock.

Every replica a session lived on writes its own part of the manifest (its entry in ``parts``)
and may write the session's fields; two replicas may do it at once (a shared record dir, an
adoption), so each change reads the file, changes it and writes it back under an exclusive
``flock``. The file is rewritten in place, padded with spaces to at least :data:`PAD_BYTES`:
once made, rewriting it needs no new disk blocks, so a recording stopped by a full disk can
still say so. (JSON allows the trailing spaces.)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

PAD_BYTES = 16 * 1024
FILE_MODE = 0o600  # recordings are personal data: the server's user only
FOLDER_MODE = 0o700


def update(folder: Path, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Applies ``change`` to the JSON document ``folder/name`` (empty when new), in place."""
    fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, FILE_MODE)
    with os.fdopen(fd, "r+b") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        old = file.read()
        document: dict[str, Any] = {}
        if old.strip():
            with contextlib.suppress(ValueError):  # a torn file (a crash mid-write): start over
                document = json.loads(old)
        change(document)
        text = json.dumps(document, indent=1, ensure_ascii=False).encode() + b"\n"
        size = max(len(old), PAD_BYTES)
        if len(text) < size:
            text = text[:-1] + b" " * (size - len(text)) + b"\n"
        file.seek(0)
        file.write(text)
        file.flush()
        if len(text) < len(old):
            file.truncate(len(text))


def read(path: Path) -> dict[str, Any]:
    """A manifest as it stands (under a shared lock, so never half-written)."""
    with path.open("rb") as file:
        fcntl.flock(file, fcntl.LOCK_SH)
        document: dict[str, Any] = json.loads(file.read())
        return document


def part_entry(document: dict[str, Any], part: int) -> dict[str, Any]:
    """The entry of part ``part`` in ``document["parts"]``, made if missing."""
    parts: list[dict[str, Any]] = document.setdefault("parts", [])
    for entry in parts:
        if entry.get("part") == part:
            return entry
    entry = {"part": part}
    parts.append(entry)
    parts.sort(key=lambda each: int(each.get("part", 0)))
    return entry


__all__ = ["FILE_MODE", "FOLDER_MODE", "PAD_BYTES", "part_entry", "read", "update"]
