"""Recorded sessions: every command and event of a session, its two audio tracks, on disk.

Opt-in per server (``omni-grpc serve --record off|all|on-request --record-dir DIR``): a recorded
session is a folder ``DIR/<session_id>/`` (:mod:`omni_grpc.wire.recording` names its files,
docs/recordings.md describes them). The parts:

* :mod:`.recorder`: on the event loop, which sessions are recorded and the wrappers that hand
  what passes through their hosts to the writer, in batches, with a bounded buffer;
* :mod:`.writer`: the thread that writes, and stops a recording (never its session) when a write
  fails; :mod:`.part` (one replica's wire log and manifest entry), :mod:`.disk` (records
  written whole); the readers make the lines and the WAV from the log
  (:mod:`omni_grpc.client.recorded`);
* :mod:`.retention`: the sweep that deletes recordings past their age or the size cap;
* :mod:`.settings`, :mod:`.counters`: the policy and the metrics.
"""

from omni_grpc.server.recording.recorder import Recorder
from omni_grpc.server.recording.settings import REDACTIONS, RecordSettings

__all__ = ["REDACTIONS", "RecordSettings", "Recorder"]
