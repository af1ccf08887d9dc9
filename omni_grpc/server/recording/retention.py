"""Retention: the server deletes recordings past their age, then the oldest past the size cap.

A recording's age is the time since its newest file was last written. The sweep runs when the
recorder starts and every :data:`RETENTION_EVERY_S` after: first every recording older than
``max_age_s`` goes, then, while all of them together hold more than ``max_total_bytes``, the
oldest. A recording this server is writing is never deleted (another replica's may be, once
it is old enough: its writer then fails and stops that recording, never the session); but the
cap holds for it too: while the recordings together still hold more than ``max_total_bytes``,
the largest of those being written are stopped (:func:`over_cap`), so no live recording grows
the folder past the cap for longer than a sweep's period. Only
folders that hold a ``manifest.json`` are counted or touched: the record dir may hold
anything else.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from omni_grpc.server.recording.counters import DELETED
from omni_grpc.wire.recording import MANIFEST

logger = logging.getLogger(__name__)

RETENTION_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class Held:
    """One recording folder: its size in bytes and when it was last written (epoch s)."""

    folder: Path
    size: int
    written_at: float


def holdings(root: Path) -> list[Held]:
    """Every recording under ``root``, oldest first."""
    found = []
    for folder in root.iterdir() if root.is_dir() else ():
        if not (folder / MANIFEST).is_file():
            continue
        size, newest = 0, 0.0
        for path in folder.iterdir():
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue  # deleted meanwhile
            size += stat.st_size
            newest = max(newest, stat.st_mtime)
        found.append(Held(folder, size, newest))
    found.sort(key=lambda held: held.written_at)
    return found


def sweep(
    root: Path, max_age_s: float, max_total_bytes: int, live: Collection[str], now: float = 0.0
) -> list[Path]:
    """Deletes what retention says must go (``live``: session ids being written here, kept);
    returns the folders deleted. ``max_age_s`` or ``max_total_bytes`` 0: no such bound."""
    now = now or time.time()
    kept, gone = [], []
    for held in holdings(root):
        if held.folder.name in live:
            kept.append(held)
        elif max_age_s and now - held.written_at > max_age_s:
            gone.append((held, "max_age"))
        else:
            kept.append(held)
    total = sum(held.size for held in kept)
    for held in list(kept):
        if not max_total_bytes or total <= max_total_bytes:
            break
        if held.folder.name in live:
            continue
        gone.append((held, "max_total_bytes"))
        total -= held.size
    deleted = []
    for held, why in gone:
        shutil.rmtree(held.folder, ignore_errors=True)
        DELETED.labels(why).inc()
        logger.info(
            "recording %s deleted (%s)",
            held.folder.name,
            why,
            extra={"session_id": held.folder.name},
        )
        deleted.append(held.folder)
    return deleted


def over_cap(root: Path, max_total_bytes: int, live: Collection[str]) -> list[str]:
    """The ``live`` recordings to stop, largest first, while everything under ``root`` holds
    more than ``max_total_bytes`` (0: no cap); after :func:`sweep` deleted what it may."""
    if not max_total_bytes:
        return []
    found = holdings(root)
    total = sum(held.size for held in found)
    stopped = []
    for held in sorted(found, key=lambda held: held.size, reverse=True):
        if total <= max_total_bytes:
            break
        if held.folder.name in live:
            stopped.append(held.folder.name)
            total -= held.size  # it grows no more; the next sweep may delete it
    return stopped


__all__ = ["RETENTION_EVERY_S", "Held", "holdings", "over_cap", "sweep"]
