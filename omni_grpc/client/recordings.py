"""Reading a recorded session (the folder a server with ``--record`` writes; docs/recordings.md).

:func:`load` reads the manifest and every part's lines into one :class:`RecordedSession`: its
lines in order, each event once (where a peer adopted the session, a part's events from the
next part's first seq on are that part's), and the user's audio by its place in a part's track.
A recording cut short (a crash, a full disk) reads up to its last complete line, and its WAV up
to its last whole frame, whatever its header says. A part the server wrote as a wire log
(format 2) has its lines and WAV made from the log first (:mod:`omni_grpc.client.recorded`).
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_grpc.audio.wav import HEADER_BYTES, wav_bytes
from omni_grpc.client.recorded.derive import derived
from omni_grpc.wire.recording import MANIFEST, events_file


class RecordingError(Exception):
    """The folder is not a recording, or one this reader cannot read."""


@dataclass
class Part:
    """One replica's part: its manifest entry, its lines, and its WAV's frames (stereo int16)."""

    entry: dict[str, Any]
    lines: list[dict[str, Any]]
    folder: Path

    @property
    def number(self) -> int:
        return int(self.entry.get("part", 1))

    @property
    def rate_hz(self) -> int:
        return int(self.entry.get("audio_format", {}).get("sample_rate_hz", 16000))

    @property
    def first_seq(self) -> int:
        return int(self.entry.get("first_seq", 1))

    def frames(self) -> bytes:
        """The WAV's frames, read to the last whole frame (a crashed writer's header may lag)."""
        name = self.entry.get("audio")
        if not name or not (self.folder / name).is_file():
            return b""
        data = (self.folder / name).read_bytes()[HEADER_BYTES:]
        return data[: len(data) - len(data) % 4]


@dataclass
class RecordedSession:
    """A whole recording: the manifest, its parts, and its lines in order."""

    folder: Path
    manifest: dict[str, Any]
    parts: list[Part]
    lines: list[tuple[Part, dict[str, Any]]] = field(default_factory=list)
    _frames: dict[int, bytes] = field(default_factory=dict)

    @property
    def session_id(self) -> str:
        return self.folder.name

    def user_audio(self, part: Part, start: int, frames: int) -> bytes:
        """``frames`` frames of the user's track of ``part`` from ``start``, as mono pcm16
        (silence where the recording has no audio)."""
        if part.number not in self._frames:
            self._frames[part.number] = part.frames()
        data = self._frames[part.number]
        if not data:
            return bytes(frames * 2)
        stereo = memoryview(data)[start * 4 : (start + frames) * 4]
        left = bytearray(len(stereo) // 2)
        left[0::2], left[1::2] = bytes(stereo[0::4]), bytes(stereo[1::4])
        return bytes(left) + bytes((frames - len(left) // 2) * 2)

    def end(self) -> dict[str, Any]:
        """How the recording ended: the last part's ``end`` line, or why it stopped."""
        last = self.parts[-1]
        stopped = last.entry.get("stopped")
        ends = [line for line in last.lines if line.get("type") == "end"]
        if ends:
            return {"reason": ends[-1].get("reason"), "last_seq": ends[-1].get("last_seq")}
        seqs = [line["seq"] for line in last.lines if line.get("type") == "event"]
        return {
            "reason": stopped["reason"] if stopped else "unfinished",
            "last_seq": seqs[-1] if seqs else 0,
        }


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The complete lines of an events file (a torn last line is left out)."""
    lines = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    for text in raw.split(b"\n"):
        if not text.strip():
            continue
        try:
            lines.append(json.loads(text))
        except ValueError:
            break  # the last line, cut by a crash or a full disk
    return lines


def load(folder: Path) -> RecordedSession:
    """Reads the recording in ``folder``; raises RecordingError when it is none."""
    try:
        manifest = json.loads((folder / MANIFEST).read_bytes())
    except (OSError, ValueError) as error:
        raise RecordingError(f"{folder} is not a recording: {error}") from None
    entries = sorted(manifest.get("parts", []), key=lambda entry: int(entry.get("part", 1)))
    if any(entry.get("wire") for entry in entries):
        for entry in entries:
            try:
                derived(folder, entry)
            except PermissionError as error:
                raise RecordingError(
                    f"{folder}: its lines are made from its wire log when first read, and the "
                    f"folder cannot be written to ({error})"
                ) from None
            except OSError as error:  # e.g. the retention sweep took it meanwhile
                raise RecordingError(f"{folder}: its wire log cannot be read: {error}") from None
        manifest = json.loads((folder / MANIFEST).read_bytes())  # with the configs found
        entries = sorted(manifest.get("parts", []), key=lambda entry: int(entry.get("part", 1)))
    if not entries:
        raise RecordingError(f"{folder}: the manifest names no part")
    parts = []
    for entry in entries:
        number = int(entry.get("part", 1))
        name = entry.get("events") or events_file(number)
        parts.append(Part(entry, read_lines(folder / name), folder))
    recorded = RecordedSession(folder, manifest, parts)
    recorded.lines = _merged(parts)
    return recorded


def _merged(parts: list[Part]) -> list[tuple[Part, dict[str, Any]]]:
    """Every part's lines in order, each event once: a part's events from the next part's
    first seq on belong to the next part (which took the session over from there); an event
    an adopter restored from the store stands in only where the part before lacks it."""
    merged: list[tuple[Part, dict[str, Any]]] = []
    seen: set[int] = set()
    for index, part in enumerate(parts):
        upto = parts[index + 1].first_seq if index + 1 < len(parts) else None
        for line in part.lines:
            if line.get("type") == "event":
                seq = int(line.get("seq", 0))
                if seq in seen or (upto is not None and seq >= upto):
                    continue
                seen.add(seq)
            merged.append((part, line))
    return merged


def listing(root: Path) -> list[dict[str, Any]]:
    """One row per recording under ``root``: id, start, end, replicas, events, size."""
    rows = []
    for folder in sorted(root.iterdir()) if root.is_dir() else ():
        if not (folder / MANIFEST).is_file():
            continue
        try:
            recorded = load(folder)
        except RecordingError:
            continue
        rows.append(summary(recorded))
    rows.sort(key=lambda row: str(row["started_at"]))
    return rows


def summary(recorded: RecordedSession) -> dict[str, Any]:
    """What ``omni-grpc recordings show`` says of a recording."""
    lines = [line for _, line in recorded.lines]
    times = [line["t"] for line in lines if "t" in line]
    kinds: dict[str, int] = {}
    for line in lines:
        if line.get("type") in ("command", "event"):
            kinds[line["type"]] = kinds.get(line["type"], 0) + 1
    first = recorded.parts[0].entry
    return {
        "session_id": recorded.session_id,
        "started_at": first.get("started_at"),
        "seconds": round(max(times) - min(times), 3) if times else 0.0,
        "replicas": [part.entry.get("replica") for part in recorded.parts],
        "engine": recorded.manifest.get("engine", {}).get("name"),
        "commands": kinds.get("command", 0),
        "events": kinds.get("event", 0),
        "audio": any(part.entry.get("audio") for part in recorded.parts),
        "redaction": recorded.manifest.get("redaction", {}),
        "end": recorded.end(),
        "bytes": sum(path.stat().st_size for path in recorded.folder.iterdir()),
    }


def export(folder: Path, archive: Path) -> Path:
    """Writes the recording as one ``.tar.gz`` an operator can attach to a bug report; each
    WAV's header is made right on the way (a recording cut short may have a stale one)."""
    recorded = load(folder)
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(folder.iterdir()):
            if path.name.startswith("."):
                continue
            data = path.read_bytes()
            part = next((p for p in recorded.parts if p.entry.get("audio") == path.name), None)
            if part is not None:
                data = _whole_wav(part)
            info = tarfile.TarInfo(f"{folder.name}/{path.name}")
            info.size, info.mode, info.mtime = len(data), 0o600, int(path.stat().st_mtime)
            tar.addfile(info, io.BytesIO(data))
    return archive


def _whole_wav(part: Part) -> bytes:
    return wav_bytes(part.frames(), part.rate_hz, channels=2)


__all__ = [
    "Part",
    "RecordedSession",
    "RecordingError",
    "export",
    "listing",
    "load",
    "read_lines",
    "summary",
]
