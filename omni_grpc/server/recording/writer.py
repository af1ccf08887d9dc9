"""The writer thread: every recording of a server is written here, off the event loop.

The event loop hands over batches of records (:mod:`.recorder` collects them for
:data:`~.recorder.BATCH_S`); this thread turns each into records of the part's wire log
(:class:`.WirePart`) and, after each batch, writes what every recording it touched has made.
A write that fails (a full disk, a file size limit, a disk that went away), or a client's audio
that runs too far ahead of the clock for the track to lay it (:class:`~.part.AheadOfClock`),
stops that recording only: its wire log is left whole up to its last complete record, its
manifest says where it stopped, a log line and ``omni_grpc_recordings_stopped_total{reason}``
say so, and the session goes on.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Sequence
from typing import Any

from omni_grpc.server.recording.counters import STOPPED
from omni_grpc.server.recording.disk import stop_reason
from omni_grpc.server.recording.part import AheadOfClock, WirePart
from omni_grpc.server.recording.state import RecordingState

logger = logging.getLogger(__name__)

# Record kinds, the first item of each record (see Recording in recorder.py).
OPEN, COMMAND, APPEND, EVENT, STREAM, NOTE, CLOSE, FAIL = range(8)


class Writer:
    """The thread, and the queue of batches it takes: ``(now, records)``, or None to stop."""

    def __init__(self) -> None:
        self._batches: queue.SimpleQueue[tuple[float, Sequence[tuple[Any, ...]]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name="omni-recordings", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, now: float, records: Sequence[tuple[Any, ...]]) -> None:
        """Hands a batch over (from the event loop)."""
        self._batches.put((now, records))

    def stop(self) -> None:
        """Writes what was handed over, then ends the thread (blocking: call it off the loop)."""
        self._batches.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (batch := self._batches.get()) is not None:
            now, records = batch
            touched: dict[RecordingState, None] = {}  # (by identity)
            for record in records:
                recording: RecordingState = record[1]
                if recording.broken:
                    recording.done += record[2]
                    continue
                try:
                    self._apply(record)
                except OSError as error:
                    self._fail(recording, now, stop_reason(error), error)
                except AheadOfClock as error:
                    self._fail(recording, now, "ahead_of_clock", error)
                except Exception as error:
                    logger.exception(
                        "session %s: recording failed",
                        recording.session_id,
                        extra={"session_id": recording.session_id},
                    )
                    self._fail(recording, now, "write_error", error)
                recording.done += record[2]
                if recording.part is not None:
                    touched[recording] = None
            for recording in touched:
                if recording.part is None or recording.broken:
                    continue
                try:
                    recording.part.flush(now)
                except OSError as error:
                    self._fail(recording, now, stop_reason(error), error)

    @staticmethod
    def _apply(record: tuple[Any, ...]) -> None:
        kind, recording = record[0], record[1]
        if kind == OPEN:
            recording.part = WirePart(record[3])
            return
        part = recording.part
        if part is None:
            return
        if kind == APPEND:
            part.append(*record[3:])
        elif kind == COMMAND:
            part.command(*record[3:])
        elif kind == EVENT:
            part.event(*record[3:])
        elif kind == STREAM:
            part.stream(*record[3:])
        elif kind == NOTE:
            part.note(*record[3:])
        elif kind == CLOSE:
            part.close(*record[3:])  # a failure here leaves the part to _fail
            recording.part = None
        elif kind == FAIL:  # the loop stopped it (too slow): say so in its files
            recording.part = None
            recording.broken = True
            part.stopped(record[3], record[4])

    @staticmethod
    def _fail(recording: RecordingState, now: float, reason: str, error: BaseException) -> None:
        recording.failed = recording.broken = True
        STOPPED.labels(reason).inc()
        logger.warning(
            "session %s: recording stopped (%s: %s); the session goes on",
            recording.session_id,
            reason,
            error,
            extra={"session_id": recording.session_id},
        )
        part, recording.part = recording.part, None
        if part is not None:
            # If the manifest cannot say it either, the wire log still ends where it stops.
            with contextlib.suppress(OSError):
                part.stopped(now, reason)


__all__ = ["Writer"]
