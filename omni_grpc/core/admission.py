"""Admission: which commands a session applies, how much input it holds, and when it idles out.

The rules held here:

* **Commands applied once.** A numbered command is applied only if its ``client_seq`` is the
  next one; a repeat (a resend after a resume) is skipped, and a jump ahead is refused with
  ``client_seq_gap`` without consuming the number. Only the stream commands of
  ``UNNUMBERED_COMMANDS`` (heartbeat, ack) may come unnumbered, and the handshake commands only
  as the first message of a stream.
* **Bounded pending input.** When the client commits its own turns, input it appended and
  has not yet committed or cleared counts against ``max_pending_input_bytes``; past it an
  append is refused as retryable ``input_backpressure``, and committing nothing is refused.
  With server VAD the engine owns the buffer, commits on its own and bounds it itself.
* **Idle expiry.** An attached session idles out ``idle_timeout`` after its last activity:
  its creation, a command from the attached stream (even one refused), a resume, or the end of
  a response. While a response runs there is no idle deadline (see
  :meth:`omni_grpc.core.session.Session.next_deadline`).
"""

from __future__ import annotations

from omni_grpc.core import tools, validation
from omni_grpc.core.errors import CommandError
from omni_grpc.core.limits import EngineFeatures, Limits
from omni_grpc.wire import pb
from omni_grpc.wire.kinds import HANDSHAKE_COMMANDS, UNNUMBERED_COMMANDS

# The code that refuses each handshake command sent on a stream that is already open.
HANDSHAKE_REFUSALS = {
    "open_session": "session_already_open",
    "resume_session": "unsupported_session_resume",
}
# Commands that end the pending input, one way or another.
INPUT_ENDING_COMMANDS = frozenset({"commit_input_audio", "clear_input_audio", "cancel_input"})
# Events from the engine that say the input buffer became an item or was dropped.
INPUT_TAKEN_EVENTS = frozenset({"input_committed", "input_cleared"})


class Admission:
    """The client's numbering, its uncommitted input and its last activity, for one session."""

    __slots__ = ("_engine", "_limits", "applied_client_seq", "last_activity", "pending_input_bytes")

    def __init__(self, limits: Limits, engine: EngineFeatures, now: float) -> None:
        self._limits = limits
        self._engine = engine
        self.applied_client_seq = 0
        self.pending_input_bytes = 0
        self.last_activity = now

    def number(self, request: pb.ConverseRequest) -> str | None:
        """Checks the command's kind and number; returns the kind, or None for a repeat.

        Raises CommandError for a command that is not one, a handshake, a missing number or
        a gap. A number that passes is consumed, whatever becomes of the command after.
        """
        kind = request.WhichOneof("command")
        seq = request.client_seq
        if kind is None:
            raise CommandError("bad_event", "the request carries no command")
        if kind in HANDSHAKE_COMMANDS:
            raise CommandError(
                HANDSHAKE_REFUSALS[kind], f"{kind} must be the first message of a new stream"
            )
        if seq == 0 and kind not in UNNUMBERED_COMMANDS:
            raise CommandError("bad_event", f"{kind} needs a client_seq", param="client_seq")
        if seq:
            if seq <= self.applied_client_seq:
                return None  # applied before: a resend after a resume
            if seq != self.applied_client_seq + 1:
                raise CommandError(
                    "client_seq_gap",
                    f"expected client_seq {self.applied_client_seq + 1}, got {seq}",
                    param="client_seq",
                )
            self.applied_client_seq = seq
        return kind

    def check_size(self, request: pb.ConverseRequest) -> None:
        """Refuses a command larger than ``max_message_bytes``."""
        if request.ByteSize() > self._limits.max_message_bytes:
            raise CommandError(
                "event_too_large",
                f"a command may have at most {self._limits.max_message_bytes} bytes",
            )

    def admit(self, kind: str, request: pb.ConverseRequest, config: pb.SessionConfig) -> None:
        """Checks a command bound for the engine and accounts for the input it adds or ends."""
        validation.check_command(request, kind, self._limits, self._engine)
        if kind == "create_response":
            tools.check_create_tools(request.create_response, config)
        elif kind == "append_input_audio":
            self._admit_audio(request.append_input_audio, config)
        elif kind in INPUT_ENDING_COMMANDS:
            committing = kind == "commit_input_audio" and _client_commits(config)
            if committing and not self.pending_input_bytes:
                raise CommandError("input_audio_buffer_empty", "there is no input audio to commit")
            self.pending_input_bytes = 0

    def _admit_audio(self, append: pb.AppendInputAudio, config: pb.SessionConfig) -> None:
        validation.check_append(append, config, self._limits, self._engine)
        if not _client_commits(config):
            return
        size = validation.media_bytes(append)
        if self.pending_input_bytes + size > self._limits.max_pending_input_bytes:
            raise CommandError(
                "input_backpressure",
                "too much uncommitted input; commit or clear first",
                retryable=True,
            )
        self.pending_input_bytes += size

    def input_taken(self) -> None:
        """The engine committed or cleared the input buffer: nothing is pending any more."""
        self.pending_input_bytes = 0

    def touch(self, now: float) -> None:
        """Something happened that restarts the idle timeout."""
        self.last_activity = now

    def idle_deadline(self, config: pb.SessionConfig) -> float:
        """When the session idles out if nothing happens before."""
        return self.last_activity + config.idle_timeout.ToMilliseconds() / 1000


def _client_commits(config: pb.SessionConfig) -> bool:
    # With server VAD the engine owns the buffer and commits on its own; it bounds it.
    return config.turn_detection.type != pb.TURN_DETECTION_TYPE_SERVER_VAD
