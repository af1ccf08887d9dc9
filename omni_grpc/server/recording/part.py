"""One replica's part of a recording: its events file, its two-track WAV, its manifest entry.

A :class:`PartWriter` lives in the writer thread (:mod:`.writer`) and turns what the session's
host handed over (:mod:`.recorder`) into lines of ``events.jsonl`` (docs/recordings.md) and
frames of the WAV (:mod:`.tracks`). Lines are written whole, a batch at a time, with
``os.write`` on a file opened for appending: a write that fails part way (a full disk, a file
size limit) is cut back to its last whole line, so the file always ends with a complete record,
and the manifest says where the recording stopped and why.

A command's line waits for the end of its handling, so that the audio the engine received for
it (an append's, after conversion; a commit's resampler tail) is named on its line by its place
in the user's track; the events it caused meanwhile follow it. Nothing written holds a key or a
resume token: the server never sees keys here, and tokens are taken out of ``resume_session``,
``session_created`` and ``session_resumed`` before anything is written.
"""

from __future__ import annotations

import errno
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from omni_grpc.server.recording import manifest
from omni_grpc.server.recording.tracks import Placed, Tracks
from omni_grpc.wire import pb
from omni_grpc.wire.audio import SAMPLE_WIDTH
from omni_grpc.wire.recording import (
    FORMAT,
    MANIFEST,
    audio_file,
    events_file,
    message_json,
    redact_text,
)

# Reasons a recording stops before its session ends (the metric's label, the manifest's word).
FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


@dataclass(frozen=True, slots=True, kw_only=True)
class PartInfo:
    """What the writer needs to start a part, gathered on the event loop."""

    session_id: str
    part: int
    replica: str
    folder: Path
    t0: float  # the server clock when this part started (frame 0 of its WAV)
    wall: str  # the same moment as UTC ISO 8601
    rate_hz: int  # the WAV's rate: the rate the engine hears the session's input at
    omit_audio: bool
    omit_text: bool
    session: dict[str, Any]  # the manifest's session-wide fields (engine, versions, ...)
    started_by: str  # "open", "adopted", "asked" (an update turned recording on)
    first_seq: int  # the first event this part numbers itself


@dataclass(slots=True)
class _Pending:
    """A command whose handling has not ended: its line, and the lines that came meanwhile."""

    line: dict[str, Any]
    held: list[tuple[bytes, int]] = field(default_factory=list)


def stop_reason(error: OSError) -> str:
    """The word for why a write failed: ``disk_full`` (no space, a quota, a size limit)."""
    return "disk_full" if error.errno in FULL else "write_error"


class PartWriter:
    """Writes one part; every method may raise OSError (the writer stops the recording)."""

    def __init__(self, info: PartInfo) -> None:
        self.info = info
        folder = info.folder
        folder.mkdir(mode=manifest.FOLDER_MODE, parents=True, exist_ok=True)
        self._fd = os.open(
            folder / events_file(info.part),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC,
            manifest.FILE_MODE,
        )
        wav = None
        if not info.omit_audio:
            fd = os.open(
                folder / audio_file(info.part),
                os.O_RDWR | os.O_CREAT | os.O_TRUNC,
                manifest.FILE_MODE,
            )
            wav = os.fdopen(fd, "w+b")
        self.tracks = Tracks(wav, info.rate_hz)
        self._lines: list[tuple[bytes, int]] = []  # (line, its event seq or 0)
        self._pending: _Pending | None = None
        self.last_seq = 0  # the last event seq written whole
        self._made_seq = 0  # the last event seq made into a line
        self._input_format = pb.AudioFormat()  # the session's, as its events tell it
        self.last_t = info.t0
        self._manifest(self._opened)
        self._add({"type": "recording", "format": FORMAT, "session_id": info.session_id,
                   "part": info.part, "replica": info.replica, "t0": info.t0,
                   "started_at": info.wall})  # fmt: skip

    # -- what the host handed over ---------------------------------------------------------

    def command(self, t: float, generation: int, body: bytes, skip: str) -> None:
        """A command the server read on attachment ``generation`` (``skip``: why the session
        did not apply it, "duplicate" or "stale"; "" when it did)."""
        self._settle()
        request = pb.ConverseRequest.FromString(body)
        kind = request.WhichOneof("command") or ""
        line: dict[str, Any] = {"type": "command", "t": t, "generation": generation,
                                "client_seq": request.client_seq, "kind": kind}  # fmt: skip
        if request.event_id:
            line["event_id"] = request.event_id
        if skip:
            line["skipped"] = skip
        if kind:
            inner = getattr(request, kind)
            if kind == "resume_session":
                inner.resume_token = ""
            elif kind == "append_input_audio":
                line["sent_ms"] = round(self._sent_ms(inner), 3)  # the client's audio
                inner.audio = b""
                line["video_frames"] = len(inner.video_frames)
                del inner.video_frames[:]  # camera frames are never recorded
            line["command"] = self._text(message_json(inner))
        self.last_t = t
        self._pending = _Pending(line)

    def handled(self) -> None:
        """The command's handling ended: its line, then what came meanwhile, go out."""
        self._settle()

    def heard(self, t: float, data: bytes, encoding: int, rate_hz: int) -> None:
        """Audio the engine received (an append's, or a commit's resampler tail)."""
        start, frames, resampled = self.tracks.user(t - self.info.t0, data, encoding, rate_hz)
        where: dict[str, Any] = {"track": "user", "start": start, "frames": frames}
        if resampled:
            where["resampled_from_hz"] = rate_hz
        if self._pending is not None:
            self._pending.line["audio"] = where

    def event(self, seq: int, t: float, payload: bytes, restored: bool = False) -> None:
        """A numbered event of the session (``restored``: one an adopting replica took from
        the store, numbered by a replica before it)."""
        event = pb.ConverseResponse.FromString(payload)
        line = self._event_line("event", t, event)
        line["seq"] = seq
        if restored:
            line["restored"] = True
        else:
            self._follow(t, event, line)
        self._add(line, seq)

    def stream(self, t: float, generation: int, payload: bytes) -> None:
        """An event of one stream only (seq 0): created, resumed, replaced, resync, going away,
        or any event after a journal overflow."""
        event = pb.ConverseResponse.FromString(payload)
        line = self._event_line("stream", t, event)
        line["generation"] = generation
        self._follow(t, event, line)
        self._add(line)

    def note(self, t: float, kind: str, fields: dict[str, Any]) -> None:
        self._add({"type": "note", "t": t, "kind": kind, **fields})

    # -- writing ---------------------------------------------------------------------------

    def flush(self, now: float) -> None:
        """Writes the lines made so far and the audio both tracks hold for good."""
        for placed in self.tracks.advance(now - self.info.t0):
            self._placed(placed)
        self._write_lines()

    def close(self, t: float, reason: str) -> None:
        """The part's end: everything written, the manifest says how it ended."""
        self._settle()
        for placed in self.tracks.close(t - self.info.t0):
            self._placed(placed)
        self._add({"type": "end", "t": t, "reason": reason, "last_seq": self._made_seq})
        self._write_lines()
        os.fsync(self._fd)
        self._close_events()
        self._manifest(lambda entry: entry.update(ended=reason, last_seq=self.last_seq, t_end=t))

    def stopped(self, t: float, reason: str) -> None:
        """A write failed: the files are closed as they are; the manifest says where they
        stop, if it can still be written."""
        try:
            self._close_events()
            self.tracks.drop()
        finally:
            stop = {"reason": reason, "t": t, "last_seq": self.last_seq}
            self._manifest(lambda entry: entry.update(ended="stopped", stopped=stop))

    # -- inside ----------------------------------------------------------------------------

    def _close_events(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def _event_line(self, kind: str, t: float, event: pb.ConverseResponse) -> dict[str, Any]:
        what = event.WhichOneof("event") or ""
        line: dict[str, Any] = {"type": kind, "t": t, "kind": what}
        if event.applied_client_seq:
            line["applied_client_seq"] = event.applied_client_seq
        if not what:
            return line
        inner = getattr(event, what)
        if what in ("session_created", "session_resumed"):
            inner.resume_token = ""
        if what == "output_audio_delta":
            data = inner.audio
            line["audio"] = self._digest(data)
            inner.audio = b""
            line["event"] = message_json(inner)
            inner.audio = data  # for the tracks (_follow)
            return line
        line["event"] = self._text(message_json(inner))
        self.last_t = t
        return line

    def _follow(self, t: float, event: pb.ConverseResponse, line: dict[str, Any]) -> None:
        """What an event tells the tracks and the manifest."""
        at = t - self.info.t0
        what = line["kind"]
        if what == "output_audio_delta":
            self.tracks.output(at, event.output_audio_delta)
        elif what == "response_done":
            response = event.response_done.response
            cancelled = response.status == pb.RESPONSE_STATUS_CANCELLED
            self.tracks.ended(at, response.id, cancelled)
        elif what == "output_audio_cleared":
            self.tracks.ended(at, event.output_audio_cleared.response_id, True)
        elif what == "item_truncated":
            cut = event.item_truncated
            self.tracks.truncated(cut.item_id, cut.audio_end_ms)
        elif what == "playback_acknowledged" and event.playback_acknowledged.truncate:
            ack = event.playback_acknowledged
            self.tracks.truncated(ack.response_id, ack.committed_ms)
        elif what in ("session_created", "session_resumed", "session_updated"):
            self._input_format.CopyFrom(getattr(event, what).session.config.input_audio_format)
            config = self._text(message_json(getattr(event, what).session.config))
            change = {"t": t, "by": what, "config": config}
            self._manifest(lambda entry: entry.setdefault("configs", []).append(change))

    def _sent_ms(self, append: pb.AppendInputAudio) -> float:
        """How long the client's audio in an append was (its format, else the session's)."""
        fmt = self._input_format
        encoding = append.encoding or fmt.encoding or pb.AUDIO_ENCODING_PCM16
        rate = append.sample_rate_hz or fmt.sample_rate_hz or self.info.rate_hz
        return len(append.audio) / SAMPLE_WIDTH.get(encoding, 2) * 1000 / rate

    def _digest(self, data: bytes) -> dict[str, Any]:
        if self.info.omit_audio:
            return {"bytes": len(data)}
        return {"bytes": len(data), "blake2b": hashlib.blake2b(data, digest_size=8).hexdigest()}

    def _text(self, body: dict[str, Any]) -> dict[str, Any]:
        return redact_text(body) if self.info.omit_text else body

    def _placed(self, placed: Placed) -> None:
        fields = {"response_id": placed.response_id, "track": "assistant", "start": placed.start,
                  "frames": placed.frames, "audio_ms": round(placed.audio_ms, 3),
                  "heard_ms": round(placed.heard_ms, 3), "cut": placed.cut}  # fmt: skip
        self.note(self.last_t, "assistant_audio", fields)

    def _add(self, line: dict[str, Any], seq: int = 0) -> None:
        self._made_seq = seq or self._made_seq
        encoded = (orjson.dumps(line) + b"\n", seq)
        if self._pending is not None:
            self._pending.held.append(encoded)
        else:
            self._lines.append(encoded)

    def _settle(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._lines.append((orjson.dumps(pending.line) + b"\n", 0))
            self._lines.extend(pending.held)

    def _write_lines(self) -> None:
        """Writes the lines made so far, whole: a write that fails part way is cut back to
        the last whole line, and the lines it wrote count."""
        lines, self._lines = self._lines, []
        if not lines:
            return
        data = b"".join(line for line, _ in lines)
        done = 0
        try:
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError:
            whole = 0
            for line, seq in lines:
                if whole + len(line) > done:
                    break
                whole += len(line)
                self.last_seq = seq or self.last_seq
            if whole < done:
                size = os.lseek(self._fd, 0, os.SEEK_END)
                os.ftruncate(self._fd, size - (done - whole))
            raise
        for _, seq in lines:
            self.last_seq = seq or self.last_seq

    def _manifest(self, change: Any) -> None:
        part = self.info.part

        def apply(document: dict[str, Any]) -> None:
            document.update(self.info.session)
            change(manifest.part_entry(document, part))

        manifest.update(self.info.folder, MANIFEST, apply)

    def _opened(self, entry: dict[str, Any]) -> None:
        info = self.info
        entry.update(
            replica=info.replica,
            events=events_file(info.part),
            audio=None if info.omit_audio else audio_file(info.part),
            audio_format={"sample_rate_hz": info.rate_hz, "channels": ["user", "assistant"]},
            started_at=info.wall,
            started_by=info.started_by,
            t0=info.t0,
            first_seq=info.first_seq,
            ended=None,
        )
        entry.setdefault("configs", [])


__all__ = ["PartInfo", "PartWriter", "stop_reason"]
