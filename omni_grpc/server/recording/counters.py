"""The recordings' Prometheus metrics (every label from a closed set, never a session id)."""

from __future__ import annotations

from prometheus_client import Counter

STARTED = Counter("omni_grpc_recordings_started", "Recordings started (one per replica part).")
STOP_REASONS = ("disk_full", "write_error", "too_slow", "ahead_of_clock", "max_total_bytes")
STOPPED = Counter(
    "omni_grpc_recordings_stopped",
    "Recordings stopped before their session ended, by reason: disk_full (no space, a quota or "
    "a file size limit), write_error (any other failed write), too_slow (the disk fell behind "
    "and the recording's buffer filled), ahead_of_clock (the client sent audio so much faster "
    "than real time that it could not wait in memory for the clock), max_total_bytes (the "
    "recordings together passed --record-max-mib while this one was written).",
    ["reason"],
)
DELETED = Counter(
    "omni_grpc_recordings_deleted",
    "Recordings the retention sweep deleted, by why: max_age or max_total_bytes.",
    ["why"],
)

__all__ = ["DELETED", "STARTED", "STOPPED", "STOP_REASONS"]
