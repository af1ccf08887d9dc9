"""What one recording's two sides share: the event loop's (``recorder.py``) and the writer
thread's (``writer.py``).

The loop hands records over and counts them (``queued``, on the recording); the writer writes
them and counts what it wrote or dropped (``done``), keeps the open files (``part``), and says
when they failed (``broken``). Either side may stop the recording (``failed``). The writer
needs no more of a recording than this, so it imports this file, never the recorder.
"""

from __future__ import annotations

from omni_grpc.server.recording.part import WirePart


class RecordingState:
    """The fields of one recording that the writer thread reads and writes."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.done = 0  # bytes written or dropped (the writer counts)
        self.failed = False  # set by either side: nothing more is handed over
        self.broken = False  # set by the writer: its files failed, nothing more is written
        self.part: WirePart | None = None  # the writer thread's own


__all__ = ["RecordingState"]
