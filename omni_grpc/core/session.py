"""One duplex session, sans I/O: commands and the time go in, effects come out.

The transport calls :meth:`Session.receive` with each command of the stream attached as
``generation``, :meth:`Session.publish` with each event the engine produces, and
:meth:`Session.tick` when :meth:`Session.next_deadline` comes. Every call returns
:class:`Effects`: payloads to write to a given attachment, commands to hand to the engine,
streams to end, and whether the session is over. Nothing here sleeps, reads a clock or touches
a socket, so every rule below is tested by calling methods.

The rules, in one place:

* **Numbered events.** Every event of the session's history gets ``seq`` from the journal and
  the last applied ``client_seq``; handshake-only events (created, resumed, replaced, resync,
  going away) get ``seq`` 0 and are never replayed.
* **Commands applied once.** A numbered command is applied only if its ``client_seq`` is the
  next one; a repeat is skipped, a jump ahead is refused with ``client_seq_gap``.
* **Attachments.** Each stream that opens or resumes the session gets a new generation. Input
  from any other generation is ignored, and a detach from a stale one is a no-op, so a replaced
  stream can neither act for the session nor strand it.
* **No stale output.** Once a response is done, later output for it is dropped here, whatever
  the engine still had in flight.
* **One ending.** Close and expiry go through the state table, which has no way out of an
  ending state, so exactly one terminal event is ever produced.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from omni_grpc.core import validation
from omni_grpc.core.config import merge_config
from omni_grpc.core.credentials import ResumeCredential
from omni_grpc.core.errors import CommandError, Status, StreamRefused
from omni_grpc.core.journal import CursorAhead, Journal, JournalGap
from omni_grpc.core.limits import EngineFeatures, Limits
from omni_grpc.core.state import State, Trigger, next_state
from omni_grpc.wire import pb
from omni_grpc.wire.kinds import HANDSHAKE_COMMANDS, RESPONSE_OUTPUT_EVENTS, UNNUMBERED_COMMANDS

_FINISHED_RESPONSES_KEPT = 256


@dataclass(slots=True)
class Effects:
    """What the transport must do after a call into the core."""

    # (attachment generation, serialized ConverseResponse), in the order to write them.
    sends: list[tuple[int, bytes]] = field(default_factory=list)
    # Commands for the engine, in order.
    engine: list[pb.ConverseRequest] = field(default_factory=list)
    # (generation, reason): end that stream once its sends are written.
    end_streams: list[tuple[int, str]] = field(default_factory=list)
    # The session is over: close its engine session and free its slot.
    ended: bool = False

    def merge(self, other: Effects) -> Effects:
        """Appends ``other`` to these effects and returns them."""
        self.sends.extend(other.sends)
        self.engine.extend(other.engine)
        self.end_streams.extend(other.end_streams)
        self.ended = self.ended or other.ended
        return self


class ResumeGap(Exception):
    """A resume that cannot replay; ``payload`` is the resync_required event to send."""

    def __init__(self, payload: bytes, message: str) -> None:
        super().__init__(message)
        self.payload = payload


class Session:
    """The state of one session and every rule about it."""

    def __init__(
        self,
        *,
        session_id: str,
        config: pb.SessionConfig,
        limits: Limits,
        engine: EngineFeatures,
        capabilities: pb.Capabilities,
        now: float,
    ) -> None:
        self.id = session_id
        self.config = config
        self.state = State.ATTACHED
        self.generation = 1
        self.applied_client_seq = 0
        self.journal = Journal(ttl_s=limits.journal_ttl_s, max_bytes=limits.journal_max_bytes)
        self.turn_state: pb.TurnState.ValueType = pb.TURN_STATE_IDLE
        self.epoch = 0
        self.active_response_id = ""
        self.pending_input_bytes = 0
        self.dropped_stale_events = 0
        self.last_activity = now
        self.detached_at: float | None = None
        self.ended_at: float | None = None
        self._limits = limits
        self._engine = engine
        self._capabilities = capabilities
        self._credential = ResumeCredential()
        self._activating: int | None = None
        self._finished: collections.OrderedDict[str, None] = collections.OrderedDict()

    def __repr__(self) -> str:
        return f"Session({self.id}, {self.state.name}, generation={self.generation})"

    # -- views ---------------------------------------------------------------------------

    def view(self) -> pb.Session:
        """Describes the session as the client sees it."""
        return pb.Session(
            id=self.id,
            config=self.config,
            state=self.state.value,
            turn_state=self.turn_state,
            epoch=self.epoch,
        )

    def check_token(self, token: str) -> bool:
        """Says, without side effects, whether ``token`` is the session's current token."""
        return self._credential.matches(token)

    def next_deadline(self) -> float | None:
        """The earliest time at which :meth:`tick` may have something to do."""
        if self.state.terminal:
            return None
        if self.state is State.DETACHED and self.detached_at is not None:
            return self.detached_at + self._limits.disconnect_grace_s
        if self.active_response_id:
            return None  # a running response is activity; its end touches the session
        return self.last_activity + self._idle_timeout_s()

    # -- life cycle ----------------------------------------------------------------------

    def created(self, now: float) -> Effects:
        """Announces the new session and its first resume token to attachment 1."""
        event = pb.ConverseResponse(
            session_created=pb.SessionCreated(
                session=self.view(),
                capabilities=self._capabilities,
                resume_token=self._credential.issue(),
                attachment_generation=self.generation,
            )
        )
        return self._send_unjournaled(event, self.generation)

    def detach(self, generation: int, now: float) -> bool:
        """The stream of ``generation`` went away; False if it no longer owned the session."""
        if self.state is not State.ATTACHED or generation != self.generation:
            return False
        if self._activating == generation:
            self._credential.roll_back()
            self._activating = None
        self.state = next_state(self.state, Trigger.DETACH)
        self.detached_at = now
        return True

    def resume(self, token: str, last_seq: int, now: float) -> tuple[int, Effects]:
        """Attaches a new stream; returns its generation and the activation to write first.

        Raises StreamRefused for a session that ended, a wrong token or an impossible cursor,
        and ResumeGap when the missed events cannot all be replayed.
        """
        if not self._credential.check(token, attached=self.state is State.ATTACHED):
            if self.state.terminal:  # no hint whether the token was right
                raise StreamRefused(
                    Status.NOT_FOUND, "session_resume_expired", f"session {self.id} has ended"
                )
            raise StreamRefused(
                Status.PERMISSION_DENIED,
                "invalid_resume_token",
                "the resume token is not valid for this session",
            )
        if self.state.terminal:
            ending = self._replay_ending(last_seq, now)
            return self.generation, ending
        try:
            replay = self.journal.replay_after(last_seq, now)
        except JournalGap as gap:
            event = pb.ConverseResponse(
                resync_required=pb.ResyncRequired(session_id=self.id, reason=gap.reason)
            )
            event.applied_client_seq = self.applied_client_seq
            raise ResumeGap(event.SerializeToString(), str(gap)) from None
        except CursorAhead as ahead:
            raise StreamRefused(
                Status.FAILED_PRECONDITION, "session_resume_conflict", str(ahead)
            ) from None
        self._credential.accept(token)
        effects = Effects()
        if self.state is State.ATTACHED:
            replaced = pb.ConverseResponse(
                session_replaced=pb.SessionReplaced(
                    session_id=self.id, attachment_generation=self.generation
                )
            )
            effects.merge(self._send_unjournaled(replaced, self.generation))
            effects.end_streams.append((self.generation, "session_replaced"))
        self.state = next_state(self.state, Trigger.RESUME)
        self.generation += 1
        self._activating = self.generation
        self.detached_at = None
        self.last_activity = now
        resumed = pb.ConverseResponse(
            session_resumed=pb.SessionResumed(
                session=self.view(),
                resume_token=self._credential.issue(),
                attachment_generation=self.generation,
                replayed_events=len(replay),
            )
        )
        effects.merge(self._send_unjournaled(resumed, self.generation))
        effects.sends.extend((self.generation, payload) for payload in replay)
        return self.generation, effects

    def _replay_ending(self, last_seq: int, now: float) -> Effects:
        """A resume after the end: the client may have missed the last events, the terminal
        one included, if its stream broke right then. It gets them, and the stream ends."""
        try:
            replay = self.journal.replay_after(last_seq, now)
        except (JournalGap, CursorAhead):
            replay = []
        if not replay:
            raise StreamRefused(
                Status.NOT_FOUND, "session_resume_expired", f"session {self.id} has ended"
            )
        self.generation += 1
        resumed = pb.ConverseResponse(
            session_resumed=pb.SessionResumed(
                session=self.view(),
                attachment_generation=self.generation,
                replayed_events=len(replay),
            )
        )
        effects = self._send_unjournaled(resumed, self.generation)
        effects.sends.extend((self.generation, payload) for payload in replay)
        effects.end_streams.append((self.generation, "session_ended"))
        return effects

    def activation_delivered(self, generation: int) -> None:
        """The client has the rotated token (it spoke on the new stream): the old one retires.

        Until then a lost stream rolls back (see :meth:`detach`), because a payload handed to
        the transport may still never reach the client.
        """
        if self._activating == generation:
            self._activating = None
            self._credential.confirm()

    def activation_failed(self, generation: int, now: float) -> None:
        """The activation could not be written: detach, and let the presented token retry."""
        if self._activating == generation and self.generation == generation:
            self._activating = None
            self._credential.roll_back()
            self.state = next_state(self.state, Trigger.ROLL_BACK)
            self.detached_at = now

    def tick(self, now: float) -> Effects:
        """Expires the session if its grace or idle time ran out."""
        deadline = self.next_deadline()
        if deadline is None or now < deadline:
            return Effects()
        reason = (
            pb.EXPIRY_REASON_DISCONNECT_GRACE
            if self.state is State.DETACHED
            else pb.EXPIRY_REASON_IDLE_TIMEOUT
        )
        return self.expire(reason, now)

    def expire(self, reason: pb.ExpiryReason.ValueType, now: float) -> Effects:
        """Ends the session as lapsed (grace, idle, or an engine that lost it)."""
        event = pb.ConverseResponse(
            session_expired=pb.SessionExpired(session_id=self.id, reason=reason)
        )
        return self._terminate(Trigger.EXPIRE, event, "session_expired", now)

    def close(self, reason: str, now: float) -> Effects:
        """Ends the session as closed, by the client or the server."""
        event = pb.ConverseResponse(
            session_closed=pb.SessionClosed(session_id=self.id, reason=reason)
        )
        return self._terminate(Trigger.CLOSE, event, reason, now)

    def going_away(self, time_left_s: float, reason: str) -> Effects:
        """Warns the attached stream that the server stops in ``time_left_s``."""
        if self.state is not State.ATTACHED:
            return Effects()
        body = pb.GoingAway(reason=reason)
        body.time_left.FromMilliseconds(int(time_left_s * 1000))
        return self._send_unjournaled(pb.ConverseResponse(going_away=body), self.generation)

    # -- commands ------------------------------------------------------------------------

    def receive(self, generation: int, request: pb.ConverseRequest, now: float) -> Effects:
        """Applies one command from the stream of ``generation``."""
        if self.state is not State.ATTACHED or generation != self.generation:
            return Effects()  # a replaced or detached stream no longer speaks for the session
        if self._activating == generation:
            # A client speaks on a resumed stream only after reading session_resumed, so it
            # holds the rotated token now and the one it presented can retire.
            self.activation_delivered(generation)
        self.last_activity = now
        kind = request.WhichOneof("command")
        seq = request.client_seq
        try:
            if kind is None:
                raise CommandError("bad_event", "the request carries no command")
            if kind in HANDSHAKE_COMMANDS:
                raise CommandError(
                    "unsupported_session_resume"
                    if kind == "resume_session"
                    else "session_already_open",
                    f"{kind} must be the first message of a new stream",
                )
            if seq == 0 and kind not in UNNUMBERED_COMMANDS:
                raise CommandError("bad_event", f"{kind} needs a client_seq", param="client_seq")
            if seq:
                if seq <= self.applied_client_seq:
                    return Effects()  # applied before: a resend after a resume
                if seq != self.applied_client_seq + 1:
                    raise CommandError(
                        "client_seq_gap",
                        f"expected client_seq {self.applied_client_seq + 1}, got {seq}",
                        param="client_seq",
                    )
                self.applied_client_seq = seq
            return self._apply(kind, request, now)
        except CommandError as error:
            return self._emit(
                pb.ConverseResponse(
                    error=error.to_error(client_seq=seq, event_id=request.event_id)
                ),
                now,
            )

    def refuse(self, generation: int, error: CommandError, now: float) -> Effects:
        """Answers input the transport could not even parse with an error event."""
        if self.state is not State.ATTACHED or generation != self.generation:
            return Effects()
        return self._emit(pb.ConverseResponse(error=error.to_error()), now)

    def _apply(self, kind: str, request: pb.ConverseRequest, now: float) -> Effects:
        if request.ByteSize() > self._limits.max_message_bytes:
            raise CommandError(
                "event_too_large",
                f"a command may have at most {self._limits.max_message_bytes} bytes",
            )
        if kind == "heartbeat":
            return self._emit(
                pb.ConverseResponse(heartbeat_ack=pb.HeartbeatAck(session_id=self.id)), now
            )
        if kind == "ack_events":
            try:
                self.journal.ack(request.ack_events.seq)
            except ValueError as error:
                raise CommandError("invalid_event_ack", str(error), param="seq") from None
            return Effects()
        if kind == "close_session":
            return self.close(request.close_session.reason or "client_close", now)
        validation.check_command(request, kind, self._limits, self._engine)
        if kind == "update_session":
            return self._update(request, now)
        if kind == "append_input_audio":
            self._admit_audio(request.append_input_audio)
        elif kind in ("commit_input_audio", "clear_input_audio", "cancel_input"):
            self._check_commit(kind)
            self.pending_input_bytes = 0
        return Effects(engine=[request])

    def _update(self, request: pb.ConverseRequest, now: float) -> Effects:
        self.config = merge_config(
            self.config, request.update_session.config, self._limits, self._engine
        )
        forwarded = pb.ConverseRequest(
            client_seq=request.client_seq,
            event_id=request.event_id,
            update_session=pb.UpdateSession(config=self.config),
        )
        effects = self._emit(
            pb.ConverseResponse(session_updated=pb.SessionUpdated(session=self.view())), now
        )
        effects.engine.append(forwarded)
        return effects

    def _admit_audio(self, append: pb.AppendInputAudio) -> None:
        validation.check_append(append, self.config, self._limits, self._engine)
        size = len(append.audio) + sum(len(frame.data) for frame in append.video_frames)
        if self._client_commits():
            if self.pending_input_bytes + size > self._limits.max_pending_input_bytes:
                raise CommandError(
                    "input_backpressure",
                    "too much uncommitted input; commit or clear first",
                    retryable=True,
                )
            self.pending_input_bytes += size

    def _check_commit(self, kind: str) -> None:
        if (
            kind == "commit_input_audio"
            and self._client_commits()
            and not (self.pending_input_bytes)
        ):
            raise CommandError("input_audio_buffer_empty", "there is no input audio to commit")

    def _client_commits(self) -> bool:
        # With server VAD the engine owns the buffer and commits on its own; it bounds it.
        return self.config.turn_detection.type != pb.TURN_DETECTION_TYPE_SERVER_VAD

    def _idle_timeout_s(self) -> float:
        return self.config.idle_timeout.ToMilliseconds() / 1000

    # -- engine output -------------------------------------------------------------------

    def publish(self, event: pb.ConverseResponse, now: float) -> Effects:
        """Numbers, journals and routes one event from the engine."""
        if self.state.terminal:
            return Effects()
        kind = event.WhichOneof("event")
        if self._is_stale(kind, event):
            self.dropped_stale_events += 1
            return Effects()
        self._observe(kind, event, now)
        return self._emit(event, now)

    def _is_stale(self, kind: str | None, event: pb.ConverseResponse) -> bool:
        if kind in RESPONSE_OUTPUT_EVENTS:
            return getattr(event, kind).response_id in self._finished
        if kind == "response_done":
            return event.response_done.response.id in self._finished
        if kind == "response_created":
            return event.response_created.response.id in self._finished
        return False

    def _observe(self, kind: str | None, event: pb.ConverseResponse, now: float) -> None:
        if kind == "speech_started":
            self.turn_state = pb.TURN_STATE_USER_SPEAKING
        elif kind in ("speech_stopped", "input_committed", "input_cleared"):
            self.pending_input_bytes = 0 if kind != "speech_stopped" else self.pending_input_bytes
            if not self.active_response_id:
                self.turn_state = pb.TURN_STATE_IDLE
        elif kind == "response_created":
            self.active_response_id = event.response_created.response.id
            self.turn_state = pb.TURN_STATE_ASSISTANT_RESPONDING
        elif kind == "response_done":
            self._finish(event.response_done.response.id, now)
            if event.response_done.response.status == pb.RESPONSE_STATUS_CANCELLED:
                self.epoch += 1

    def _finish(self, response_id: str, now: float) -> None:
        self._finished[response_id] = None
        if len(self._finished) > _FINISHED_RESPONSES_KEPT:
            self._finished.popitem(last=False)
        if self.active_response_id == response_id:
            self.active_response_id = ""
            self.turn_state = pb.TURN_STATE_IDLE
        self.last_activity = now  # the end of a response counts as activity for idle expiry

    # -- delivery ------------------------------------------------------------------------

    def _emit(self, event: pb.ConverseResponse, now: float) -> Effects:
        """Journals ``event`` (unless the journal overflowed) and sends it if attached."""
        event.applied_client_seq = self.applied_client_seq
        target = self.generation if self.state is State.ATTACHED else None
        effects = Effects()
        if not self.journal.overflowed:
            event.seq = self.journal.next_seq
            payload = event.SerializeToString()
            if self.journal.record(payload, now):
                if target is not None:
                    effects.sends.append((target, payload))
                return effects
            # This event overflowed the journal: say so once, then go on unnumbered.
            event.seq = 0
            resync = pb.ConverseResponse(
                resync_required=pb.ResyncRequired(
                    session_id=self.id, reason=pb.RESYNC_REASON_JOURNAL_OVERFLOW
                ),
                applied_client_seq=self.applied_client_seq,
            )
            if target is not None:
                effects.sends.append((target, resync.SerializeToString()))
        if target is not None:
            effects.sends.append((target, event.SerializeToString()))
        return effects

    def _send_unjournaled(self, event: pb.ConverseResponse, generation: int) -> Effects:
        event.applied_client_seq = self.applied_client_seq
        return Effects(sends=[(generation, event.SerializeToString())])

    def _terminate(
        self, trigger: Trigger, event: pb.ConverseResponse, reason: str, now: float
    ) -> Effects:
        if self.state.terminal:
            return Effects()
        attached = self.generation if self.state is State.ATTACHED else None
        effects = self._emit(event, now)
        self.state = next_state(self.state, trigger)
        self.ended_at = now
        self._activating = None
        if attached is not None:
            effects.end_streams.append((attached, reason))
        effects.ended = True
        return effects
