"""The recordings' Prometheus metrics (every label from a closed set, never a session id)."""

from __future__ import annotations

from prometheus_client import Counter

STARTED = Counter("omni_grpc_recordings_started", "Recordings started (one per replica part).")
STOP_REASONS = ("disk_full", "write_error", "too_slow")
STOPPED = Counter(
    "omni_grpc_recordings_stopped",
    "Recordings stopped before their session ended, by reason: disk_full (no space, a quota or "
    "a file size limit), write_error (any other failed write), too_slow (the disk fell behind "
    "and the recording's buffer filled).",
    ["reason"],
)
DELETED = Counter(
    "omni_grpc_recordings_deleted",
    "Recordings the retention sweep deleted, by why: max_age or max_total_bytes.",
    ["why"],
)

__all__ = ["DELETED", "STARTED", "STOPPED", "STOP_REASONS"]
