"""Admission: which commands a session applies, how much input it holds, and when it idles out.

The rules held here:

* **Commands applied once.** A numbered command is applied only if its ``client_seq`` is the
  next one; a repeat (a resend after a resume) is skipped, and a jump ahead is refused with
  ``client_seq_gap`` without consuming the number. Only the stream commands of
  ``UNNUMBERED_COMMANDS`` (heartbeat, ack) may come unnumbered, and the handshake commands only
  as the first message of a stream.
* **Admitted once, trusted after.** A command bound for the engine is checked here once and
  handed on as the engine's own frozen value (:mod:`.commands`), its fields read once: for an
  append, its audio (protobuf's upb makes a new ``bytes`` object at every read of a bytes
  field), its format resolved against the session's, and whether the engine takes that format
  as it is (``native``). The edge converts only what this says it must; engines trust the
  canonical form they get.
* **Bounded pending input, in one ledger.** When the client commits its own turns, audio it
  appended and has not yet committed or cleared waits in the engine. It is counted here, once,
  in the bytes the engine keeps (canonical pcm16, or pcm16 at a rate the engine takes natively:
  8 kHz G.711 counts four times its wire size), against the session's own share
  (``max_pending_input_bytes``), its key's share of the budget when it has one
  (``key_shares.py``), and then the server's memory budget (``budget.py``). An append past any
  is refused as retryable ``input_backpressure`` (with a ``retry_after`` when the
  server is full) before it is converted or reaches the engine, and committing nothing is
  refused. A commit, a clear, a cancel, the engine's input_committed or input_cleared, and the
  session's end give the bytes back. With server VAD the engine owns the buffer, commits on its
  own and bounds it itself (``max_input_s``).
* **Idle expiry.** An attached session idles out ``idle_timeout`` after its last activity:
  its creation, a command from the attached stream (even one refused), a resume, or the end of
  a response. While a response runs there is no idle deadline (see
  :meth:`omni_grpc.core.session.Session.next_deadline`).
"""

from __future__ import annotations

from collections.abc import Sequence

from omni_grpc.core import tools, validation
from omni_grpc.core.budget import BUDGET_RETRY_AFTER_S, MemoryBudget
from omni_grpc.core.commands import AppendAudio, EngineCommand, append_audio, engine_command
from omni_grpc.core.errors import CommandError
from omni_grpc.core.limits import EngineFeatures, Limits
from omni_grpc.core.transcription import check_no_response
from omni_grpc.wire import pb
from omni_grpc.wire.kinds import HANDSHAKE_COMMANDS, UNNUMBERED_COMMANDS
from omni_grpc.wire.pcm import canonical_input_bytes

# The code that refuses each handshake command sent on a stream that is already open.
HANDSHAKE_REFUSALS = {
    "open_session": "session_already_open",
    "resume_session": "unsupported_session_resume",
}
# Commands that end the pending input, one way or another.
INPUT_ENDING_COMMANDS = frozenset({"commit_input_audio", "clear_input_audio", "cancel_input"})
# Events from the engine that say the input buffer became an item or was dropped.
INPUT_TAKEN_EVENTS = frozenset({"input_committed", "input_cleared"})
_PCM16 = pb.AUDIO_ENCODING_PCM16
_SERVER_VAD = pb.TURN_DETECTION_TYPE_SERVER_VAD
# Builds an append's value in one call, its rare parts absent: the usual chunk, on the hot path.
_new_append = tuple.__new__


class Admission:
    """The client's numbering, its uncommitted input and its last activity, for one session."""

    __slots__ = (
        "budget",
        "key_budget",
        "_config",
        "_engine",
        "_input",
        "_limits",
        "_native_rates_hz",
        "applied_client_seq",
        "last_activity",
        "pending_input_bytes",
    )

    def __init__(
        self, limits: Limits, engine: EngineFeatures, now: float, budget: MemoryBudget
    ) -> None:
        self._limits = limits
        self._engine = engine
        self._native_rates_hz = frozenset(engine.native_input_rates_hz)
        # The configuration the input format below was read from (read again when it changes):
        # its input encoding and rate, and whether the client commits its turns.
        self._config: pb.SessionConfig | None = None
        self._input: tuple[pb.AudioEncoding.ValueType, int, bool] = (
            pb.AUDIO_ENCODING_UNSPECIFIED,
            0,
            True,
        )
        self.budget = budget
        # The share of the budget of the key the session is charged to (set by the transport,
        # with ``hold_for_key``); None: the server's budget only.
        self.key_budget: MemoryBudget | None = None
        self.applied_client_seq = 0
        self.pending_input_bytes = 0  # held in the budget too, in the engine's bytes
        self.last_activity = now

    @property
    def max_pending_input_bytes(self) -> int:
        """The session's own bound on its uncommitted input."""
        return self._limits.max_pending_input_bytes

    def number(self, request: pb.ConverseRequest, kind: str | None) -> str | None:
        """Checks the command's kind and number; returns the kind, or None for a repeat.

        Raises CommandError for a command that is not one, a handshake, a missing number or
        a gap. A number that passes is consumed, whatever becomes of the command after.
        """
        seq = request.client_seq
        if kind is None:
            raise CommandError("bad_event", "the request carries no command")
        if kind in HANDSHAKE_COMMANDS:
            raise CommandError(
                HANDSHAKE_REFUSALS[kind], f"{kind} must be the first message of a new stream"
            )
        if seq == 0:
            if kind not in UNNUMBERED_COMMANDS:
                raise CommandError("bad_event", f"{kind} needs a client_seq", param="client_seq")
            return kind
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

    def admit(
        self, kind: str, request: pb.ConverseRequest, config: pb.SessionConfig
    ) -> EngineCommand:
        """Checks a command bound for the engine (not an append) and ends the pending input
        for the commands that end it."""
        validation.check_command(request, kind, self._limits, self._engine)
        check_no_response(kind, request, config)
        if kind == "create_response":
            tools.check_create_tools(request.create_response, config)
        elif kind in INPUT_ENDING_COMMANDS:
            committing = kind == "commit_input_audio" and client_commits(config)
            if committing and not self.pending_input_bytes:
                raise CommandError("input_audio_buffer_empty", "there is no input audio to commit")
            self.input_taken()
        return engine_command(request, kind)

    def admit_audio(
        self,
        request: pb.ConverseRequest,
        append: pb.AppendInputAudio,
        audio: bytes,
        config: pb.SessionConfig,
        frames: Sequence[pb.VideoFrame] | None = None,
    ) -> AppendAudio:
        """Checks an append (its ``audio``, and its ``frames`` when given, read once by the
        caller) and holds what it adds to the pending input; raises CommandError when it is
        refused, holding nothing."""
        if config is not self._config:  # read once per configuration, not per chunk
            fmt = config.input_audio_format
            self._input = (fmt.encoding, fmt.sample_rate_hz, client_commits(config))
            self._config = config
        session_encoding, session_rate_hz, commits = self._input
        encoding = append.encoding or session_encoding
        rate_hz = append.sample_rate_hz or session_rate_hz
        if request.trace_context:  # any command may carry one; bounded like other maps
            validation.check_metadata(request.trace_context, "trace_context")
        if frames is None:
            frames = append.video_frames
        validation.check_audio(append, audio, encoding, rate_hz, self._limits, self._engine, frames)
        native = encoding == _PCM16 and rate_hz in self._native_rates_hz
        if commits:  # the client commits its turns: its input is held
            plain = native and not frames  # the usual chunk: held as it came
            self._hold(
                len(audio) if plain else held_bytes(len(audio), encoding, rate_hz, native, frames)
            )
        seq, event_id = request.client_seq, request.event_id
        if (
            frames
            or (append.HasField("hints") and append.hints.fields)  # no Struct built when unset
            or append.HasField("audio_end_ms")
        ):
            return append_audio(append, audio, encoding, rate_hz, seq, event_id, native)
        return _new_append(
            AppendAudio, (audio, encoding, rate_hz, native, seq, event_id, None, (), None)
        )

    def readmit(self, request: pb.ConverseRequest) -> EngineCommand:
        """A command admitted on another replica, as stored for the adopter to replay (an
        append with its format resolved): nothing is checked or held again, the ledger came
        with the session (:meth:`restore_pending`)."""
        kind = request.WhichOneof("command")
        if kind != "append_input_audio":
            return engine_command(request, kind)
        append = request.append_input_audio
        encoding, rate_hz = append.encoding, append.sample_rate_hz
        native = encoding == _PCM16 and rate_hz in self._native_rates_hz
        seq, event_id = request.client_seq, request.event_id
        return append_audio(append, append.audio, encoding, rate_hz, seq, event_id, native)

    def _hold(self, size: int) -> None:
        if self.pending_input_bytes + size > self._limits.max_pending_input_bytes:
            raise CommandError(
                "input_backpressure",
                "too much uncommitted input; commit or clear first",
                retryable=True,
            )
        key, budget = self.key_budget, self.budget
        if key is not None and key.held + size > key.capacity_bytes:
            raise CommandError(
                "input_backpressure",
                "this API key holds its share of the server's memory; commit or clear, or retry",
                retryable=True,
                retry_after_s=BUDGET_RETRY_AFTER_S,
            )
        if budget.held + size > budget.capacity_bytes:
            raise CommandError(
                "input_backpressure",
                "the server holds as much input audio as it may; commit or clear, or retry",
                retryable=True,
                retry_after_s=BUDGET_RETRY_AFTER_S,
            )
        budget.held += size
        if key is not None:
            key.held += size
        self.pending_input_bytes += size

    def restore_pending(self, size: int) -> None:
        """Holds ``size`` bytes of input admitted on another replica (an adopted session, whose
        audio the adopter replays into its engine). Never refused: the bytes were admitted
        once, within the same per-session bound, and refusing them now would lose them."""
        self.budget.held += size
        self.pending_input_bytes += size

    def hold_for_key(self, key_budget: MemoryBudget | None) -> None:
        """Charges the pending input to ``key_budget`` from now on (the key of the stream that
        opened or resumed the session), moving what is held already."""
        if self.key_budget is not None:
            self.key_budget.held -= self.pending_input_bytes
        self.key_budget = key_budget
        if key_budget is not None:
            key_budget.held += self.pending_input_bytes

    def input_taken(self) -> None:
        """The input buffer was committed, cleared or dropped: its bytes go back."""
        if self.pending_input_bytes:
            self.budget.held -= self.pending_input_bytes
            if self.key_budget is not None:
                self.key_budget.held -= self.pending_input_bytes
            self.pending_input_bytes = 0

    def touch(self, now: float) -> None:
        """Something happened that restarts the idle timeout."""
        self.last_activity = now

    def idle_deadline(self, config: pb.SessionConfig) -> float:
        """When the session idles out if nothing happens before."""
        return self.last_activity + config.idle_timeout.ToMilliseconds() / 1000


def held_bytes(
    size: int, encoding: int, rate_hz: int, native: bool, video_frames: Sequence[pb.VideoFrame]
) -> int:
    """What an append of ``size`` bytes of audio adds to the pending input, in the bytes the
    engine keeps."""
    if not native:
        size = canonical_input_bytes(size, encoding, rate_hz)
    if video_frames:
        size += sum(len(frame.data) for frame in video_frames)
    return size


def client_commits(config: pb.SessionConfig) -> bool:
    """Whether the client ends its own turns (with server VAD the engine owns the buffer)."""
    return config.turn_detection.type != _SERVER_VAD
