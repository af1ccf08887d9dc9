"""One duplex session, sans I/O: commands and the time go in, effects come out.

The transport calls :meth:`Session.receive` with each command of the stream attached as
``generation``, :meth:`Session.publish` with each event the engine produces, and
:meth:`Session.tick` when :meth:`Session.next_deadline` comes. Every call returns
:class:`~omni_grpc.core.delivery.Effects`: payloads to write to a given attachment, commands to
hand to the engine, streams to end, and whether the session is over. Nothing here sleeps, reads
a clock or touches a socket, so every rule is tested by calling methods.

This file holds the session's lifecycle: its attachments, their generations, resume tokens,
replay and the ending. Each other rule lives with the part that keeps it:
``admission.py`` (commands applied once, bounded pending input, idle expiry),
``rate_limits.py`` (commands and input audio per second, per session and per API key),
``responses.py`` (no stale output, and the turn state) and ``delivery.py`` (numbered events).
The rules held here:

* **Attachments.** Each stream that opens or resumes the session gets a new generation. Input
  from any other generation is ignored, and a detach from a stale one is a no-op, so a replaced
  stream can neither act for the session nor strand it.
* **Tenancy.** A session belongs to the API key that opened it. A resume or takeover with
  another key, with a wrong token, or of a session that ended with nothing left to replay gets
  the one refusal an unknown id gets (:func:`resume_refused`), after the same work (see
  ``credentials.py``), so no answer tells which session ids exist.
* **Exact resume.** A resume with the current token replays every journaled event after the
  client's cursor, or fails whole: ``resync_required`` when some of them are gone, a refusal
  for a cursor ahead of the journal. A resume while a stream is attached takes the session
  over and ends the old stream. The token rotates; if the new stream goes away before the
  client spoke on it, the token presented works once more (see ``credentials.py``).
* **One ending.** Close and expiry go through the state table, which has no way out of an
  ending state, so exactly one terminal event is ever produced. A client whose stream broke
  just then can still resume the ended session (kept as a tombstone, see ``registry.py``),
  read what it missed, the terminal event included, and its stream ends.
"""

from __future__ import annotations

from omni_grpc.core.admission import INPUT_TAKEN_EVENTS, Admission
from omni_grpc.core.budget import MemoryBudget
from omni_grpc.core.commands import UpdateSession
from omni_grpc.core.config import merge_config, resolve_recording
from omni_grpc.core.credentials import SessionLock
from omni_grpc.core.delivery import Delivery, Effects
from omni_grpc.core.errors import CommandError, Status, StreamRefused
from omni_grpc.core.journal import CursorAhead, Journal, JournalGap
from omni_grpc.core.limits import EngineFeatures, Limits
from omni_grpc.core.rate_limits import Allowance, Throttle
from omni_grpc.core.responses import Responses
from omni_grpc.core.state import State, Trigger, next_state
from omni_grpc.core.transcription import shown
from omni_grpc.wire import pb


class ResumeGap(Exception):
    """A resume that cannot replay; ``payload`` is the resync_required event to send."""

    def __init__(self, payload: bytes, message: str) -> None:
        super().__init__(message)
        self.payload = payload


def _too_large(limit: int) -> CommandError:
    return CommandError("event_too_large", f"a command may have at most {limit} bytes")


def resume_refused() -> StreamRefused:
    """The one answer to a resume that names no session its caller may resume.

    Unknown id, ended, another key's, or a wrong token: the same status, code and message, so
    a probe learns nothing about which session ids exist.
    """
    return StreamRefused(Status.NOT_FOUND, "session_resume_expired", "unknown or expired session")


class Session:
    """One session: its lifecycle here, its other rules in the parts it holds."""

    def __init__(
        self,
        *,
        session_id: str,
        config: pb.SessionConfig,
        limits: Limits,
        engine: EngineFeatures,
        capabilities: pb.Capabilities,
        now: float,
        owner_key: str = "",
        budget: MemoryBudget | None = None,
    ) -> None:
        self.id = session_id
        self.config = config
        self.state = State.ATTACHED
        self.generation = 1
        self.opened_at = now  # when it took its place here (a length the queue learns from)
        self.detached_at: float | None = None
        self.ended_at: float | None = None
        # The error code of the last command's refusal ("" when it was applied): the transport
        # reads it after each ``receive`` to count refusals by code.
        self.last_refusal = ""
        # Why the last command was skipped with no effect ("" when it was not): "stale", from a
        # stream that no longer speaks for the session, or "duplicate", a resend of a command
        # applied before. Observers (a recording) read it instead of deciding again.
        self.last_skip = ""
        # The server's memory budget (the registry's); a session made alone has one of its own.
        if budget is None:
            budget = MemoryBudget(limits.memory_budget_bytes)
        self.admission = Admission(limits, engine, now, budget)
        self.throttle = Throttle(Allowance.for_session(limits, now))
        self.responses = Responses()
        self.journal = Journal(ttl_s=limits.journal_ttl_s, max_bytes=limits.journal_max_bytes)
        self.delivery = Delivery(session_id, self.journal)
        self._limits = limits
        self._engine = engine
        self._capabilities = capabilities
        # The key that opened the session (as a digest) and its resume token.
        self.lock = SessionLock(owner_key)
        # The generation whose activation (session_resumed) the client may not have yet.
        self._activating: int | None = None
        # The routing key of the replica hosting the session, told to the client (see registry).
        self.route = ""
        # The server's recording policy, applied to each configuration (see registry).
        self.recording = "off"

    def __repr__(self) -> str:
        return f"Session({self.id}, {self.state.name}, generation={self.generation})"

    # -- views ---------------------------------------------------------------------------

    @property
    def applied_client_seq(self) -> int:
        """The client_seq of the last command applied."""
        return self.admission.applied_client_seq

    def view(self) -> pb.Session:
        """Describes the session as the client sees it."""
        return pb.Session(
            id=self.id,
            config=self.config,
            state=self.state.value,
            turn_state=self.responses.turn.wire,
            epoch=self.responses.epoch,
        )

    def check_token(self, token: str) -> bool:
        """Says, without side effects, whether ``token`` is the session's current token."""
        return self.lock.resume.matches(token)

    def next_deadline(self) -> float | None:
        """The earliest time at which :meth:`tick` may have something to do."""
        if self.state.terminal:
            return None
        if self.state is State.DETACHED and self.detached_at is not None:
            return self.detached_at + self._limits.disconnect_grace_s
        if self.responses.active_response_id:
            return None  # a running response is activity; its end touches the session
        return self.admission.idle_deadline(self.config)

    # -- attachments ---------------------------------------------------------------------

    def created(self, carried: SessionLock | None = None) -> Effects:
        """Announces the new session and its first resume token to attachment 1.

        ``carried`` is the lock of the wait the session opens after (``session_queue.py``):
        its token resumes the session until the client speaks, as after a resume, since the
        stream may break before this event reaches the client.
        """
        if carried is not None:
            self.lock.resume.carry(carried.resume)
            self._activating = self.generation
        event = pb.ConverseResponse(
            session_created=pb.SessionCreated(
                session=self.view(),
                capabilities=self._capabilities,
                resume_token=self.lock.resume.issue(),
                attachment_generation=self.generation,
                route=self.route,
            )
        )
        return self._send(event, self.generation)

    def detach(self, generation: int, now: float) -> bool:
        """The stream of ``generation`` went away; False if it no longer owned the session."""
        if not self._speaks_for_session(generation):
            return False
        if self._activating == generation:
            self.lock.resume.roll_back()
            self._activating = None
        self.state = next_state(self.state, Trigger.DETACH)
        self.detached_at = now
        return True

    def resume(
        self, token: str, last_seq: int, now: float, *, key: str = ""
    ) -> tuple[int, Effects]:
        """Attaches a new stream for the caller with API ``key``; returns its generation and the
        activation to write first.

        Raises StreamRefused for another key, a wrong token, a session that ended with nothing
        to replay (all three as :func:`resume_refused`) or an impossible cursor, and ResumeGap
        when the missed events cannot all be replayed.
        """
        if not self.lock.opens(key, token, attached=self.state is State.ATTACHED):
            raise resume_refused()
        if self.state.terminal:
            ending = self._replay_ending(last_seq, now)  # a new generation, to be returned
            return self.generation, ending
        try:
            replay = self.journal.replay_after(last_seq, now)
        except JournalGap as gap:
            event = pb.ConverseResponse(
                resync_required=pb.ResyncRequired(session_id=self.id, reason=gap.reason),
                applied_client_seq=self.applied_client_seq,
            )
            raise ResumeGap(event.SerializeToString(), str(gap)) from None
        except CursorAhead as ahead:
            raise StreamRefused(
                Status.FAILED_PRECONDITION, "session_resume_conflict", str(ahead)
            ) from None
        self.lock.resume.accept(token)
        effects = Effects()
        if self.state is State.ATTACHED:
            replaced = pb.ConverseResponse(
                session_replaced=pb.SessionReplaced(
                    session_id=self.id, attachment_generation=self.generation
                )
            )
            effects.merge(self._send(replaced, self.generation))
            effects.end_streams.append((self.generation, "session_replaced"))
        self.state = next_state(self.state, Trigger.RESUME)
        self.generation += 1
        self._activating = self.generation
        self.detached_at = None
        self.admission.touch(now)
        resumed = pb.ConverseResponse(
            session_resumed=pb.SessionResumed(
                session=self.view(),
                resume_token=self.lock.resume.issue(),
                attachment_generation=self.generation,
                replayed_events=len(replay),
                route=self.route,
            )
        )
        effects.merge(self._send(resumed, self.generation))
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
            raise resume_refused()
        self.generation += 1
        resumed = pb.ConverseResponse(
            session_resumed=pb.SessionResumed(
                session=self.view(),
                attachment_generation=self.generation,
                replayed_events=len(replay),
            )
        )
        effects = self._send(resumed, self.generation)
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
            self.lock.resume.confirm()

    def going_away(self, time_left_s: float, reason: str) -> Effects:
        """Warns the attached stream that the server stops in ``time_left_s``."""
        if self.state is not State.ATTACHED:
            return Effects()
        body = pb.GoingAway(reason=reason)
        body.time_left.FromMilliseconds(int(time_left_s * 1000))
        return self._send(pb.ConverseResponse(going_away=body), self.generation)

    # -- the ending ----------------------------------------------------------------------

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
        return self._end(Trigger.EXPIRE, event, "session_expired", now)

    def close(self, reason: str, now: float) -> Effects:
        """Ends the session as closed, by the client or the server."""
        event = pb.ConverseResponse(
            session_closed=pb.SessionClosed(session_id=self.id, reason=reason)
        )
        return self._end(Trigger.CLOSE, event, reason, now)

    def _end(
        self, trigger: Trigger, event: pb.ConverseResponse, reason: str, now: float
    ) -> Effects:
        if self.state.terminal:
            return Effects()  # ended before: the table has no second ending
        attached = self._attached_generation()
        self.state = next_state(self.state, trigger)
        self.ended_at = now
        self._activating = None
        self.admission.input_taken()  # the engine session and its buffer go
        return self.delivery.terminate(
            event,
            to=attached,
            reason=reason,
            applied_client_seq=self.applied_client_seq,
            now=now,
        )

    # -- commands and engine output ------------------------------------------------------

    def receive(
        self,
        generation: int,
        request: pb.ConverseRequest,
        now: float,
        kind: str | None = None,
        size: int = 0,
    ) -> Effects:
        """Applies one command from the stream of ``generation``.

        ``kind`` is the command's ``oneof`` field and ``size`` its length on the wire, when the
        transport has them already (each is read once per command; 0 and None: found here).
        A command bound for the engine comes back in ``Effects.engine``, as the engine's value
        (:mod:`omni_grpc.core.commands`).
        """
        self.last_refusal = self.last_skip = ""
        # Every command comes through here: the checks below are the helpers' bodies, inline.
        if self.state is not State.ATTACHED or generation != self.generation:
            self.last_skip = "stale"
            return Effects()  # a replaced or detached stream no longer speaks for the session
        if self._activating == generation:
            # A client speaks on a resumed stream only after reading session_resumed, so it
            # holds the rotated token now and the one it presented can retire.
            self.activation_delivered(generation)
        admission = self.admission
        admission.last_activity = now  # any command touches the session
        if kind is None:
            kind = request.WhichOneof("command")
        try:
            if admission.number(request, kind) is None:
                self.last_skip = "duplicate"
                return Effects()
            limit = self._limits.max_message_bytes
            if kind == "append_input_audio":  # the usual command, its audio read once here
                append = request.append_input_audio
                audio = append.audio
                frames = append.video_frames  # upb builds a new container at each read
                media = len(audio)
                if frames:
                    media += sum(len(frame.data) for frame in frames)
                # Past the limit: refused, its number used up.
                self.throttle.charge(request, now, kind, media)
                if (size or request.ByteSize()) > limit:
                    raise _too_large(limit)
                admitted = admission.admit_audio(request, append, audio, self.config, frames)
                return Effects(engine=[admitted])
            wire = size or request.ByteSize()  # any command pays its bytes, as appends do
            self.throttle.charge(request, now, kind, wire)
            if wire > limit:
                raise _too_large(limit)
            return self._apply(kind, request, now)  # type: ignore[arg-type]  # number() said
        except CommandError as error:
            self.last_refusal = error.code
            body = error.to_error(client_seq=request.client_seq, event_id=request.event_id)
            return self._emit(pb.ConverseResponse(error=body), now)

    def refuse(self, generation: int, error: CommandError, now: float) -> Effects:
        """Answers input the transport could not even parse with an error event."""
        if not self._speaks_for_session(generation):
            return Effects()
        return self._emit(pb.ConverseResponse(error=error.to_error()), now)

    def _apply(self, kind: str, request: pb.ConverseRequest, now: float) -> Effects:
        if kind == "heartbeat":
            ack = pb.ConverseResponse(heartbeat_ack=pb.HeartbeatAck(session_id=self.id))
            return self._emit(ack, now)
        if kind == "ack_events":
            self.delivery.ack(request.ack_events.seq)
            return Effects()
        if kind == "close_session":
            return self.close(request.close_session.reason or "client_close", now)
        admitted = self.admission.admit(kind, request, self.config)
        if kind == "update_session":
            return self._update(request, now)
        return Effects(engine=[admitted])

    def _update(self, request: pb.ConverseRequest, now: float) -> Effects:
        self.config = merge_config(
            self.config, request.update_session.config, self._limits, self._engine
        )
        resolve_recording(self.config, self.recording)
        updated = pb.ConverseResponse(session_updated=pb.SessionUpdated(session=self.view()))
        effects = self._emit(updated, now)
        # The engine gets the whole configuration in force, not the patch.
        effects.engine.append(UpdateSession(self.config, request.client_seq, request.event_id))
        return effects

    def publish(self, event: pb.ConverseResponse, now: float, kind: str | None = None) -> Effects:
        """Numbers, journals and routes one event from the engine (``kind``: its ``oneof``
        field, when the caller has read it already)."""
        if self.state is State.CLOSED or self.state is State.EXPIRED:  # ended (no enum hash)
            return Effects()
        if kind is None:
            kind = event.WhichOneof("event")
        if not self.responses.accept(kind, event) or not shown(kind, self.config):
            return Effects()  # stale output of a finished response, or a transcript turned off
        if kind in INPUT_TAKEN_EVENTS:
            self.admission.input_taken()
        elif kind == "response_done":
            self.admission.touch(now)  # the end of a response counts as activity
            # What the client may still send, as OpenAI tells after every response.
            event.response_done.rate_limits.extend(self.throttle.limits(now))
        elif kind == "response_listen" and event.response_listen.response_id:
            event.response_listen.rate_limits.extend(self.throttle.limits(now))  # it ends one
        return self.delivery.emit(
            event,
            to=self.generation if self.state is State.ATTACHED else None,
            applied_client_seq=self.admission.applied_client_seq,
            now=now,
        )

    # -- delivery ------------------------------------------------------------------------

    def _speaks_for_session(self, generation: int) -> bool:
        return self.state is State.ATTACHED and generation == self.generation

    def _attached_generation(self) -> int | None:
        return self.generation if self.state is State.ATTACHED else None

    def _emit(self, event: pb.ConverseResponse, now: float) -> Effects:
        return self.delivery.emit(
            event,
            to=self._attached_generation(),
            applied_client_seq=self.applied_client_seq,
            now=now,
        )

    def _send(self, event: pb.ConverseResponse, generation: int) -> Effects:
        return Delivery.send(event, to=generation, applied_client_seq=self.applied_client_seq)
