"""Writing a wire log whole: a write that fails part way is cut back to its last whole record.

Records are written with ``os.write`` on a file opened for appending, a batch at a time; a write
that fails part way (a full disk, a file size limit) is cut back to its last whole record, so a
reader always finds whole records, and the writer knows the last event written (the manifest
says it).
"""

from __future__ import annotations

import errno
import os

# Failures that mean the disk (or the file's size limit, or a quota) is full.
FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


def stop_reason(error: OSError) -> str:
    """The word for why a write failed: ``disk_full`` (no space, a quota, a size limit)."""
    return "disk_full" if error.errno in FULL else "write_error"


def write_whole(
    fd: int, records: list[tuple[bytes, int]], last_seq: int
) -> tuple[int, OSError | None]:
    """Writes ``records`` (each with its event seq, or 0) to ``fd``; returns the last event seq
    written whole since ``last_seq``, and the failure, if a write failed: the file is then cut
    back to its last whole record."""
    data = b"".join(record for record, _ in records)
    done = 0
    try:
        while done < len(data):
            done += os.write(fd, data[done:])
    except OSError as error:
        whole = 0
        for record, seq in records:
            if whole + len(record) > done:
                break
            whole += len(record)
            last_seq = seq or last_seq
        if whole < done:
            size = os.lseek(fd, 0, os.SEEK_END)
            os.ftruncate(fd, size - (done - whole))
        return last_seq, error
    for _, seq in records:
        last_seq = seq or last_seq
    return last_seq, None


__all__ = ["FULL", "stop_reason", "write_whole"]
