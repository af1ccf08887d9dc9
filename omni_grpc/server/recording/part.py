"""One replica's part of a recording, as the server writes it: its wire log and its manifest entry.

A :class:`WirePart` lives in the writer thread (:mod:`.writer`) and appends what the session's
host handed over (:mod:`.recorder`) to the part's wire log (``wire.bin``,
:data:`~omni_grpc.wire.recording.WIRE_RECORD`): each command and each event as the protobuf
bytes it came as, and the audio the engine heard only where it is not the audio the client sent.
Nothing is formatted per chunk: the lines of ``events.jsonl`` and the frames of ``audio.wav``
are made by the readers from the log (:mod:`omni_grpc.client.recorded`). Records are written
whole, a batch at a time, with ``os.write`` on a file opened for appending: a write that fails
part way (a full disk, a file size limit) is cut back to its last whole record, and the manifest
says where the recording stopped and why.

What never reaches the disk is taken out here, before anything is written: a resume token (of
``resume_session``, ``session_created``, ``session_resumed``), the value of an engine option
whose name says it is a secret, camera frames (left out on the loop), and, when the recording
omits them, the audio (only its length is kept) and the text. The usual chunk's records, an
append and an output audio delta, hold none of these and are written as they came.
"""

from __future__ import annotations

import contextlib
import os
import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import Message

import omni_grpc
from omni_grpc.client.recorded import manifest, tracks
from omni_grpc.client.recorded.tracks import JITTER_S, AheadOfClock
from omni_grpc.core.limits import PROTOCOL_VERSION, EngineFeatures
from omni_grpc.server.recording.disk import write_whole
from omni_grpc.server.recording.settings import RecordSettings
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, SAMPLE_WIDTH
from omni_grpc.wire.recording import (
    AUDIO_OMITTED,
    FORMAT,
    HEARD_AS_SENT,
    MANIFEST,
    OMITTED_SIZE,
    RESTORED,
    SKIP_FLAGS,
    W_COMMAND,
    W_END,
    W_EVENT,
    W_HEARD,
    W_NOTE,
    W_OPEN,
    W_STREAM,
    WIRE_RECORD,
    audio_file,
    events_file,
    message_json,
    redact_secrets,
    redact_text,
    secrets_left_out,
    wire_file,
)

# The user's audio that may run ahead of the clock (sent faster than real time), in seconds:
# past it the recording stops, ahead_of_clock (its track would hold it in memory to lay it).
MAX_AHEAD_S = tracks.MAX_AHEAD_S
_DELTA = "output_audio_delta"
_TOKENS = ("session_created", "session_resumed")


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


class WirePart:
    """Writes one part's wire log; every method may raise OSError (the writer stops the
    recording), or :class:`AheadOfClock`."""

    def __init__(self, info: PartInfo) -> None:
        self.info = info
        info.folder.mkdir(mode=manifest.FOLDER_MODE, parents=True, exist_ok=True)
        self._fd = os.open(
            info.folder / wire_file(info.part),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC,
            manifest.FILE_MODE,
        )
        self._records: list[tuple[bytes, int]] = []  # (record, its event seq or 0)
        self.last_seq = 0  # the last event seq written whole
        self._made_seq = 0  # the last event seq made into a record
        self._user_end_s = 0.0  # where the user's next append may start on the track
        self._manifest(self._opened)
        header = {"format": FORMAT, "session_id": info.session_id, "part": info.part,
                  "replica": info.replica, "t0": info.t0, "started_at": info.wall,
                  "rate_hz": info.rate_hz, "omit_audio": info.omit_audio,
                  "omit_text": info.omit_text}  # fmt: skip
        self._json(W_OPEN, info.t0, header)

    # -- what the host handed over ---------------------------------------------------------

    def append(
        self,
        t: float,
        generation: int,
        skip: str,
        body: bytes,
        heard: bytes | None,
        encoding: int,
        rate_hz: int,
        as_sent: bool,
    ) -> None:
        """An append the server read at ``t``, as it came (``body``), and the audio the engine
        ``heard`` of it in ``encoding`` at ``rate_hz`` (None: skipped or refused); ``as_sent``:
        that audio is the append's own, not written twice."""
        if heard is not None:
            self._ahead(t, len(heard), encoding, rate_hz)
        flags = SKIP_FLAGS[skip]
        if as_sent:
            flags |= HEARD_AS_SENT
        elif heard is not None:
            self._heard(t, heard, encoding, rate_hz)
        if self.info.omit_text:  # its hints may hold words
            body = self._redacted(pb.ConverseRequest.FromString(body))
        if self.info.omit_audio:
            flags |= AUDIO_OMITTED
            request = pb.ConverseRequest.FromString(body)
            size = len(request.append_input_audio.audio)
            request.append_input_audio.audio = b""
            body = OMITTED_SIZE.pack(size) + request.SerializeToString()
        header = WIRE_RECORD.pack(W_COMMAND, flags, encoding, t, generation, rate_hz, len(body))
        self._records.append((header + body, 0))

    def command(self, t: float, generation: int, body: bytes, skip: str, tail: bytes) -> None:
        """Any other command the server read at ``t`` (``tail``: the audio a commit flushed to
        the engine from the resampler)."""
        if tail:
            self._heard(t, tail, pb.AUDIO_ENCODING_PCM16, CANONICAL_INPUT_RATE_HZ)
        request = pb.ConverseRequest.FromString(body)
        if request.HasField("resume_session"):
            request.resume_session.resume_token = ""
        body = self._redacted(request)
        self._record(W_COMMAND, SKIP_FLAGS[skip], t, generation, body)

    def event(self, seq: int, t: float, payload: bytes, restored: bool = False) -> None:
        """A numbered event of the session (``restored``: one an adopting replica took from
        the store, numbered by a replica before it)."""
        flags = RESTORED if restored else 0
        if self.info.omit_audio or not is_delta(payload):  # the usual one is kept as it is
            more, payload = self._event(pb.ConverseResponse.FromString(payload))
            flags |= more
        self._made_seq = seq
        record = WIRE_RECORD.pack(W_EVENT, flags, 0, t, seq, 0, len(payload))
        self._records.append((record + payload, seq))

    def stream(self, t: float, generation: int, payload: bytes) -> None:
        """An event of one stream only (seq 0)."""
        flags, payload = self._event(pb.ConverseResponse.FromString(payload))
        self._record(W_STREAM, flags, t, generation, payload)

    def note(self, t: float, kind: str, fields: dict[str, Any]) -> None:
        self._json(W_NOTE, t, {"kind": kind, **fields})

    # -- writing ---------------------------------------------------------------------------

    def flush(self, now: float) -> None:
        """Writes the records made so far."""
        records, self._records = self._records, []
        if records:
            self.last_seq, failure = write_whole(self._fd, records, self.last_seq)
            if failure is not None:
                raise failure

    def close(self, t: float, reason: str) -> None:
        """The part's end: everything written, the manifest says how it ended."""
        self._json(W_END, t, {"reason": reason, "last_seq": self._made_seq})
        self.flush(t)
        os.fsync(self._fd)
        self._close_log()
        end = {"ended": reason, "last_seq": self.last_seq, "t_end": t, "ended_at": _now()}
        self._manifest(lambda entry: entry.update(end))

    def stopped(self, t: float, reason: str) -> None:
        """A write failed, or the loop stopped the recording: the log is closed as it is; the
        manifest says where it stops, if it can still be written."""
        try:
            if self._fd >= 0 and self._records:  # what is made, if the log takes it
                with contextlib.suppress(OSError):
                    self.flush(t)
            self._close_log()
        finally:
            stop = {"reason": reason, "t": t, "last_seq": self.last_seq}
            end = {"ended": "stopped", "stopped": stop, "ended_at": _now()}
            self._manifest(lambda entry: entry.update(end))

    # -- inside ----------------------------------------------------------------------------

    def _ahead(self, t: float, size: int, encoding: int, rate_hz: int) -> None:
        """Lays the append on the user's clock as the track will (end to end when sent faster
        than real time); raises :class:`AheadOfClock` past :data:`MAX_AHEAD_S`."""
        seconds = size / SAMPLE_WIDTH.get(encoding, 2) / (rate_hz or self.info.rate_hz)
        arrived = t - self.info.t0
        start = self._user_end_s
        if arrived - seconds - JITTER_S > start:
            start = arrived - seconds  # a pause before it: it starts when it was captured
        self._user_end_s = start + seconds
        if self._user_end_s - arrived > MAX_AHEAD_S:
            raise AheadOfClock(
                f"the user's audio runs {self._user_end_s - arrived:.0f} s ahead of the clock "
                f"(at most {MAX_AHEAD_S:g} s may wait)"
            )

    def _heard(self, t: float, audio: bytes, encoding: int, rate_hz: int) -> None:
        flags = 0
        if self.info.omit_audio:
            flags, audio = AUDIO_OMITTED, OMITTED_SIZE.pack(len(audio))
        self._records.append(
            (WIRE_RECORD.pack(W_HEARD, flags, encoding, t, 0, rate_hz, len(audio)) + audio, 0)
        )

    def _event(self, event: pb.ConverseResponse) -> tuple[int, bytes]:
        """An event's bytes as recorded, and its flags: an audio delta as it came (its audio
        left out, with its length kept, when the recording omits audio), any other event
        without its secrets (and its text, when the recording omits text)."""
        kind = event.WhichOneof("event")
        if kind == _DELTA:
            if not self.info.omit_audio:
                return 0, event.SerializeToString()
            size = len(event.output_audio_delta.audio)
            event.output_audio_delta.audio = b""
            return AUDIO_OMITTED, OMITTED_SIZE.pack(size) + event.SerializeToString()
        if kind in _TOKENS:
            getattr(event, kind).resume_token = ""
        return 0, self._redacted(event)

    def _redacted(self, message: Message) -> bytes:
        """``message``'s bytes with the values of secret engine options left out (and its text,
        when the recording omits text)."""
        body = message_json(message)
        kept = redact_secrets(body)
        if self.info.omit_text:
            kept = redact_text(kept)
        if kept == body:
            return message.SerializeToString()  # resume tokens, if any, cleared already
        redacted = type(message)()
        json_format.ParseDict(kept, redacted)
        return redacted.SerializeToString()

    def _record(self, kind: int, flags: int, t: float, number: int, body: bytes) -> None:
        record = WIRE_RECORD.pack(kind, flags, 0, t, number, 0, len(body)) + body
        self._records.append((record, 0))

    def _json(self, kind: int, t: float, fields: dict[str, Any]) -> None:
        self._record(kind, 0, t, 0, orjson.dumps(fields))

    def _close_log(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

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
            wire=wire_file(info.part),
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


def without_frames(request: pb.ConverseRequest) -> pb.ConverseRequest:
    """An append as recorded: camera frames are never recorded, their types are."""
    kept = pb.ConverseRequest()
    kept.CopyFrom(request)
    frames = kept.append_input_audio.video_frames
    types = [frame.mime_type for frame in frames]
    del frames[:]
    frames.extend(pb.VideoFrame(mime_type=mime_type) for mime_type in types)
    return kept


def session_fields(
    settings: RecordSettings, engine: EngineFeatures, options: dict[str, str]
) -> dict[str, Any]:
    """The manifest's session-wide fields (engine options that look secret are left out)."""
    kept = secrets_left_out(options)
    return {
        "format": FORMAT,
        "engine": {"name": engine.name, "options": kept},
        "versions": {
            "omni_grpc": omni_grpc.__version__,
            "protocol": PROTOCOL_VERSION,
            "python": platform.python_version(),
        },
        "policy": settings.policy,
        "redaction": {"audio": settings.omit_audio, "text": settings.omit_text},
    }


def _delta_tag() -> bytes:
    """The key an output audio delta's field starts with: its number, wire type 2, a varint."""
    key = pb.ConverseResponse.DESCRIPTOR.fields_by_name[_DELTA].number << 3 | 2
    tag = bytearray()
    while key > 0x7F:
        tag.append(key & 0x7F | 0x80)
        key >>= 7
    tag.append(key)
    return bytes(tag)


_DELTA_TAG = _delta_tag()
_SEQ_KEY, _APPLIED_KEY = 0x08, 0x10  # fields 1 and 2, varints


def is_delta(payload: bytes) -> bool:
    """Whether a numbered event's bytes are an output audio delta's, read off its first bytes
    instead of parsing it (the usual event, once a chunk): protobuf writes a message's fields in
    the order of their numbers, and before the ``event`` oneof come only ``seq`` and
    ``applied_client_seq``, two varints. Any doubt answers False (the event is then parsed)."""
    size = len(payload)
    if not size or payload[0] != _SEQ_KEY:
        return False
    at = 1
    while at < size and payload[at] & 0x80:  # seq's varint
        at += 1
    at += 1
    if at < size and payload[at] == _APPLIED_KEY:
        at += 1
        while at < size and payload[at] & 0x80:  # applied_client_seq's varint
            at += 1
        at += 1
    return payload[at : at + len(_DELTA_TAG)] == _DELTA_TAG


def _now() -> str:
    """The wall clock's time now, as the manifest writes times (UTC, ISO 8601)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


__all__ = [
    "MAX_AHEAD_S",
    "AheadOfClock",
    "PartInfo",
    "WirePart",
    "is_delta",
    "session_fields",
    "without_frames",
]
