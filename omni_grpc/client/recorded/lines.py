"""The lines of ``events.jsonl``: the usual ones made fast, and writing them whole.

Every chunk of a recorded session makes an append's line and an audio delta's; their JSON is
proto JSON's (``message_json``), made here without a walk over the message. Lines are written
with ``os.write`` on a file opened for appending, a batch at a time; a write that fails part way
(a full disk, a file size limit) is cut back to its last whole line, so a reader always finds
whole records, and the writer knows the last event written (the manifest says it).
"""

from __future__ import annotations

import errno
import os
from typing import Any

from omni_grpc.wire import pb

# Failures that mean the disk (or the file's size limit, or a quota) is full.
FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
ENCODINGS: dict[int, str] = {int(v): pb.AudioEncoding.Name(v) for v in pb.AudioEncoding.values()}


def delta_json(delta: pb.OutputAudioDelta, *, timed: bool = True) -> dict[str, Any]:
    """An output audio delta as proto JSON (``message_json``'s output), without its audio
    (and without its place on the response's clock, ``timed`` False)."""
    body: dict[str, Any] = {}
    if delta.response_id:
        body["response_id"] = delta.response_id
    if delta.item_id:
        body["item_id"] = delta.item_id
    if delta.encoding:
        body["encoding"] = ENCODINGS[delta.encoding]
    if delta.sample_rate_hz:
        body["sample_rate_hz"] = delta.sample_rate_hz
    if timed and delta.start_ms:
        body["start_ms"] = delta.start_ms
    if timed and delta.duration_ms:
        body["duration_ms"] = delta.duration_ms
    return body


def stop_reason(error: OSError) -> str:
    """The word for why a write failed: ``disk_full`` (no space, a quota, a size limit)."""
    return "disk_full" if error.errno in FULL else "write_error"


def write_whole(
    fd: int, lines: list[tuple[bytes, int]], last_seq: int
) -> tuple[int, OSError | None]:
    """Writes ``lines`` (each with its event seq, or 0) to ``fd``; returns the last event seq
    written whole since ``last_seq``, and the failure, if a write failed: the file is then cut
    back to its last whole line."""
    data = b"".join(line for line, _ in lines)
    done = 0
    try:
        while done < len(data):
            done += os.write(fd, data[done:])
    except OSError as error:
        whole = 0
        for line, seq in lines:
            if whole + len(line) > done:
                break
            whole += len(line)
            last_seq = seq or last_seq
        if whole < done:
            size = os.lseek(fd, 0, os.SEEK_END)
            os.ftruncate(fd, size - (done - whole))
        return last_seq, error
    for _, seq in lines:
        last_seq = seq or last_seq
    return last_seq, None


__all__ = ["ENCODINGS", "FULL", "delta_json", "stop_reason", "write_whole"]
