"""A part's ``events.jsonl`` and ``audio.wav``, made from its wire log when it is read.

The server writes each part's wire log (``wire.bin``, :data:`~omni_grpc.wire.recording.
WIRE_RECORD`) and nothing else per chunk; the readers (:func:`omni_grpc.client.recordings.load`,
and so ``omni-grpc recordings`` and ``replay``) make the part's lines and WAV from it with
:func:`derive`, beside it in the recording's folder, once, and again only when the log has
changed since (a recording still being written, or one cut by a crash and read before). The
files are written under temporary names and renamed into place, so a reader never sees half of
one; they take the log's modification time, which says that they are up to date.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import orjson

from omni_grpc.client.recorded import manifest
from omni_grpc.client.recorded.part import PartHeader, PartLines
from omni_grpc.client.recorded.tracks import AheadOfClock
from omni_grpc.wire import pb
from omni_grpc.wire.recording import (
    AUDIO_OMITTED,
    HEARD_AS_SENT,
    MANIFEST,
    OMITTED_SIZE,
    RESTORED,
    SKIPPED_DUPLICATE,
    SKIPPED_STALE,
    W_COMMAND,
    W_END,
    W_EVENT,
    W_HEARD,
    W_NOTE,
    W_OPEN,
    W_STREAM,
    audio_file,
    events_file,
    wire_records,
)

# How often the tracks are told the time while the log is read: as often as the server's
# writer thread handed them records when it wrote them itself (format 1), so that a response is
# placed as it was then.
FLUSH_EVERY_S = 0.25
# A log written to this recently is made again however its time compares: a file system's clock
# may not tick between two writes.
SETTLED_S = 2.0


def stale(folder: Path, entry: dict[str, Any]) -> bool:
    """Whether the part of ``entry`` has a wire log its events file was not made from yet (or
    one written to within :data:`SETTLED_S`, whose time may not have moved since)."""
    wire = folder / str(entry.get("wire"))
    events = folder / str(entry.get("events") or events_file(int(entry.get("part", 1))))
    try:
        made = wire.stat().st_mtime_ns
    except FileNotFoundError:
        return False
    try:
        return events.stat().st_mtime_ns != made or time.time_ns() - made < SETTLED_S * 1e9
    except FileNotFoundError:
        return True


def derive(folder: Path, entry: dict[str, Any]) -> None:
    """Makes the part's events file and WAV from its wire log, and writes the configurations
    in force it finds into the part's manifest entry (``configs``)."""
    number = int(entry.get("part", 1))
    wire = folder / str(entry["wire"])
    made = wire.stat().st_mtime_ns
    records = wire_records(wire.read_bytes())
    first = next(records, None)
    if first is None or first[0] != W_OPEN:
        return  # cut before its first record was whole: nothing to make
    header = orjson.loads(first[6])
    info = PartHeader(
        session_id=header["session_id"],
        part=number,
        replica=header["replica"],
        t0=header["t0"],
        wall=header["started_at"],
        rate_hz=header["rate_hz"],
        omit_audio=header["omit_audio"],
        omit_text=False,  # the server left the text out of the log already, if asked to
    )
    events = folder / str(entry.get("events") or events_file(number))
    wav = None if info.omit_audio else folder / str(entry.get("audio") or audio_file(number))
    making = f".{os.getpid()}.making"  # two readers at once make their own
    made_paths = [(events.with_name(f".{events.name}{making}"), events)]
    if wav is not None:
        made_paths.append((wav.with_name(f".{wav.name}{making}"), wav))
    fd = os.open(made_paths[0][0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, manifest.FILE_MODE)
    wav_file = None
    if wav is not None:
        wav_fd = os.open(made_paths[1][0], os.O_RDWR | os.O_CREAT | os.O_TRUNC, manifest.FILE_MODE)
        wav_file = os.fdopen(wav_fd, "w+b")
    try:
        lines = PartLines(info, fd, wav_file)
        _play(lines, records, info.t0)
    finally:
        os.close(fd)
        if wav_file is not None and not wav_file.closed:
            wav_file.close()
    for temporary, final in made_paths:
        os.utime(temporary, ns=(made, made))
        os.replace(temporary, final)
    configs = lines.configs
    manifest.update(folder, MANIFEST, lambda document: _configs(document, number, configs))


def _configs(document: dict[str, Any], number: int, configs: list[dict[str, Any]]) -> None:
    manifest.part_entry(document, number)["configs"] = configs


def _play(lines: PartLines, records: Any, t0: float) -> None:
    """Hands every record after the first to ``lines``, in order."""
    heard: tuple[bytes, int, int] | None = None  # a HEARD record, for the command after it
    flushed, last_t = t0, t0
    for kind, flags, encoding, t, number, rate, body in records:
        if t - flushed >= FLUSH_EVERY_S:
            lines.flush(t)
            flushed = t
        last_t = max(last_t, t)
        try:
            if kind == W_HEARD:
                heard = (_audio(flags, body), encoding, rate)
            elif kind == W_COMMAND:
                _command(lines, flags, encoding, t, number, rate, body, heard)
                heard = None
            elif kind == W_EVENT:
                lines.event(number, t, _event(flags, body), bool(flags & RESTORED))
            elif kind == W_STREAM:
                lines.stream(t, number, _event(flags, body))
            elif kind == W_NOTE:
                note = orjson.loads(body)
                lines.note(t, note.pop("kind"), note)
            elif kind == W_END:
                lines.close(t, orjson.loads(body)["reason"])
                return
        except AheadOfClock:  # the server stopped the recording here too
            break
    lines.cut(last_t)


def _command(
    lines: PartLines,
    flags: int,
    encoding: int,
    t: float,
    generation: int,
    rate: int,
    body: bytes,
    heard: tuple[bytes, int, int] | None,
) -> None:
    skip = ""
    if flags & SKIPPED_DUPLICATE:
        skip = "duplicate"
    elif flags & SKIPPED_STALE:
        skip = "stale"
    omitted = None
    if flags & AUDIO_OMITTED:
        (omitted,) = OMITTED_SIZE.unpack_from(body)
        body = body[OMITTED_SIZE.size :]
    request = pb.ConverseRequest.FromString(body)
    if not request.HasField("append_input_audio"):
        tail = heard[0] if heard is not None else b""
        lines.command(t, generation, body, skip, tail)
        return
    append = request.append_input_audio
    if omitted is not None:
        append.audio = bytes(omitted)
    sent = (int(append.encoding), append.sample_rate_hz, len(append.audio))
    extra = None  # the rare parts of an append, as proto bytes
    if append.HasField("audio_end_ms") or append.HasField("hints") or append.video_frames:
        extra = pb.AppendInputAudio(
            audio_end_ms=append.audio_end_ms if append.HasField("audio_end_ms") else None,
            hints=append.hints if append.HasField("hints") else None,
            video_frames=[pb.VideoFrame(mime_type=f.mime_type) for f in append.video_frames],
        ).SerializeToString()
    audio: bytes | None = None
    if flags & HEARD_AS_SENT:
        audio = append.audio
    elif heard is not None:
        audio, encoding, rate = heard
    ids = (request.client_seq, request.event_id)
    lines.append(t, generation, skip, *ids, sent, extra, audio, encoding, rate)


def _audio(flags: int, body: bytes) -> bytes:
    """A HEARD record's audio (silence of its length, where the recording omits audio)."""
    if flags & AUDIO_OMITTED:
        return bytes(OMITTED_SIZE.unpack_from(body)[0])
    return body


def _event(flags: int, body: bytes) -> bytes:
    """An event's bytes (its audio silence of its length, where the recording omits audio)."""
    if not flags & AUDIO_OMITTED:
        return body
    (size,) = OMITTED_SIZE.unpack_from(body)
    event = pb.ConverseResponse.FromString(body[OMITTED_SIZE.size :])
    event.output_audio_delta.audio = bytes(size)
    return event.SerializeToString()


def derived(folder: Path, entry: dict[str, Any]) -> None:
    """Makes the part's files if its wire log has changed since they were made; raises
    PermissionError when the folder cannot be written to and they were never made (files made
    before are read as they stand)."""
    if entry.get("wire") and stale(folder, entry):
        events = folder / str(entry.get("events") or events_file(int(entry.get("part", 1))))
        try:
            derive(folder, entry)
        except PermissionError:
            if not events.exists():
                raise


__all__ = ["FLUSH_EVERY_S", "SETTLED_S", "derive", "derived", "stale"]
