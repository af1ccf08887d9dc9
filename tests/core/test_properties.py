"""A model client drives sessions through every interleaving hypothesis can find.

The client owns the session's credentials and cursor. Each stream it opens (the first, and
each resume, including a takeover from a second device while the old stream still lingers)
reads events in order; a ghost of a replaced stream may still send. Rules cover engine
output, numbered commands, acks, disconnects that lose commands in flight, resumes with any
cursor (inside the journal window or not, with the current or the recovery token), resumed
streams that die before or after the client read them or spoke on them, stale tokens, time,
expiry and closes. An ended session is checked one last time and buried; the next one opens,
and the client may later read a missed ending from the tombstone. The machine predicts every
numbered event (kind, label, applied_client_seq) and checks, after every step:

* the client gets each seq once per attachment sequence, contiguously, and what it got is
  exactly what was produced, in order; attached, it is fully caught up;
* every numbered command is applied exactly once (engine commands counted by client_seq);
* there is at most one terminal event, and exactly one once the session ended;
* state, generation, deadline and counters agree with the model.

Only the exceptions the core documents (StreamRefused, ResumeGap) are ever caught.
"""

from __future__ import annotations

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from omni_grpc.core import Effects, ResumeGap, Status, StreamRefused
from omni_grpc.core.responses import TurnState
from omni_grpc.wire import pb

from .helpers import TERMINAL_KINDS, cmd, created, delta, done, requests, transcript
from .model import LIMITS, Ended, Pending, SessionModel, key, window_start

# CI's 3,000 examples take a minute and a half, three times that under coverage tracing:
# more than the suite's default per-test timeout.
pytestmark = pytest.mark.timeout(900)


# Named, not lambdas: hypothesis describes preconditions on every step, and a lambda's
# description means parsing its source each time.
def ready(machine: SessionModel) -> bool:
    return machine.ready


def has_old_streams(machine: SessionModel) -> bool:
    return bool(machine.old_generations)


def not_activating(machine: SessionModel) -> bool:
    return machine.pending is None


def activating(machine: SessionModel) -> bool:
    return machine.pending is not None


def has_ended_sessions(machine: SessionModel) -> bool:
    return bool(machine.graveyard)


def mature(machine: SessionModel) -> bool:
    # Endings wait a dozen steps, so that a session lives long enough for its journal to age,
    # its commands to pile up and its streams to come and go.
    return machine.age >= 12


class SessionMachine(SessionModel, RuleBasedStateMachine):
    # -- engine ------------------------------------------------------------------------------

    @rule(action=st.sampled_from(["transcript", "respond", "delta", "done", "cancel", "stale"]))
    def engine_output(self, action: str) -> None:
        if action == "stale" and self.finished:
            assert self.session.publish(delta(self.finished[-1]), self.now) == Effects()
            self.stale_drops += 1
            return
        if action == "transcript" or (action != "respond" and not self.active):
            marker = self.fresh("m")
            event, expected = transcript(marker), ("input_transcription", marker)
        elif not self.active:
            self.active = self.fresh("r")
            event, expected = created(self.active), ("response_created", self.active)
        elif action in ("delta", "respond"):
            piece = self.fresh("d")
            event, expected = (
                delta(self.active, piece),
                ("output_text_delta", f"{self.active}:{piece}"),
            )
        else:
            status = (
                pb.RESPONSE_STATUS_CANCELLED
                if action == "cancel"
                else (pb.RESPONSE_STATUS_COMPLETED)
            )
            event, expected = (
                done(self.active, status),
                ("response_done", f"{self.active}:{status}"),
            )
            self.finished.append(self.active)
            self.epoch += action == "cancel"
            self.active, self.last_activity = "", self.now
        effects = self.session.publish(event, self.now)
        self.expect(*expected)
        self.deliver(effects)

    # -- client commands ---------------------------------------------------------------------

    @precondition(ready)
    @rule(
        action=st.sampled_from(
            ["text", "text", "heartbeat", "invalid", "heartbeat0", "ack", "ack0", "bad_ack", "jump"]
        ),
        arg=st.integers(0, 3),
    )
    def client_sends(self, action: str, arg: int) -> None:
        c = self.client
        assert c.generation is not None
        if action in ("text", "heartbeat", "invalid"):
            request = self.numbered(action)
        elif action == "heartbeat0":  # unnumbered, as a keep-alive may be
            request = cmd(0, heartbeat=pb.Heartbeat())
        elif action == "jump":  # a buggy client skips numbers: refused, and not consumed
            seq = c.next_client_seq + 1 + arg
            request = cmd(seq, f"j{seq}", append_input_text=pb.AppendInputText(text="j"))
        else:  # acks of what the client has (numbered or not), or of what was never sent
            seq = len(self.expected) + 1 + arg if action == "bad_ack" else max(c.last_seq - arg, 0)
            client_seq = 0 if action == "ack0" else c.next_client_seq
            request = cmd(client_seq, f"a{client_seq}", ack_events=pb.AckEvents(seq=seq))
            if client_seq:
                c.sent[client_seq] = request
                c.next_client_seq += 1
        self.send(request, c.generation)

    @precondition(ready)
    @rule(lost=st.integers(0, 3))
    def disconnect(self, lost: int) -> None:
        for _ in range(lost):  # written by the client, never read by the server
            self.numbered("text")
        assert self.session.detach(self.generation, self.now) is True
        self.roll_back(self.generation)  # if it never spoke since resuming
        self.client.generation, self.detached_at = None, self.now

    @precondition(has_old_streams)
    @rule(data=st.data())
    def ghost(self, data: st.DataObject) -> None:
        generation = data.draw(st.sampled_from(sorted(self.old_generations)))
        before = (self.session.state, self.session.detached_at)
        assert self.session.detach(generation, self.now) is False
        request = cmd(self.client.next_client_seq, append_input_text=pb.AppendInputText())
        for late in (request, cmd(0, heartbeat=pb.Heartbeat())):
            assert self.session.receive(generation, late, self.now) == Effects()
        assert (self.session.state, self.session.detached_at) == before

    # -- resume ------------------------------------------------------------------------------

    @precondition(not_activating)
    @rule(
        cursor_at=st.sampled_from(["last", "last", "earlier", "before_window"]),
        back=st.integers(0, 4),
        racing=st.booleans(),
        older_token=st.booleans(),
    )
    def resume(self, cursor_at: str, back: int, racing: bool, older_token: bool) -> None:
        c = self.client
        assert c.token in self.valid_tokens()
        valid_older = self.valid_tokens() - {c.token}
        if older_token and valid_older:
            # The one-shot recovery token, used by a client that never read the rotated one
            # (here: the same client, from a copy of its state saved before that resume).
            [c.token] = valid_older
        start, head = self.window_start(), len(self.expected)
        if cursor_at == "earlier" and c.last_seq >= start:  # it lost what it had after this
            cursor = max(c.last_seq - back, start)
        elif cursor_at == "before_window" and start > 0:  # a client bug, or a stale cursor
            cursor = max(start - 1 - back, 0)
        else:
            cursor = c.last_seq  # may itself be outside the window, if events aged out
        request = pb.ResumeSession(
            session_id=self.session.id, resume_token=c.token, last_received_seq=cursor
        )
        try:
            _, generation, effects = self.registry.resume(request, self.now)
        except ResumeGap as gap:
            assert cursor < start
            assert pb.ConverseResponse.FromString(gap.payload) == pb.ConverseResponse(
                applied_client_seq=self.applied,
                resync_required=pb.ResyncRequired(
                    session_id=self.session.id, reason=pb.RESYNC_REASON_JOURNAL_GAP
                ),
            )
            event(f"resume: journal gap ({cursor_at})")
            if c.last_seq < start:
                # The client gives up on what it missed and goes on from the newest event.
                c.lost |= set(range(c.last_seq + 1, head + 1))
                c.last_seq = head
            return
        assert cursor >= start
        event("resume: takeover" if self.detached_at is None else "resume: reattach")
        event(f"resume: replays {min(head - cursor, 3)}{'+' if head - cursor > 3 else ''}")
        if c.token == self.recovery:
            event("resume: with the recovery token")
        if racing:  # a second stream with the same token, before the first one settled
            with pytest.raises(StreamRefused, match="session_resume_expired"):
                self.registry.resume(request, self.now)
        if self.detached_at is None:  # a takeover
            self.old_generations.add(self.generation)
            assert effects.end_streams == [(self.generation, "session_replaced")]
        self.generation += 1
        assert generation == self.generation
        c.generation, self.detached_at, self.last_activity = None, None, self.now
        for seq in range(cursor + 1, c.last_seq + 1):  # replay resends what it forgot
            c.log.pop(seq, None)
            c.lost.discard(seq)
        c.last_seq = cursor
        # The presented token is what a rollback restores; an older recovery is spent.
        self.activating, self.recovery = (generation, c.token), None
        self.pending = Pending(generation, c.known_applied)
        self.deliver(effects)
        resumed = self.pending.buffer[0].session_resumed
        assert resumed.replayed_events == head - cursor
        assert resumed.attachment_generation == generation
        self.current_token = resumed.resume_token
        self.issued.append(self.current_token)

    @precondition(activating)
    @rule(
        outcome=st.sampled_from(["read", "read", "confirmed", "detached", "detached"]),
        received=st.integers(0, 4),
        lazy=st.booleans(),
    )
    def settle(self, outcome: str, received: int, lazy: bool) -> None:
        """The resumed stream's first events reach the client, or the stream dies first."""
        pending, c = self.pending, self.client
        assert pending is not None
        self.pending = None
        c.generation = pending.generation
        event(f"activation: {outcome}")
        if outcome in ("read", "confirmed"):
            for received_event in pending.buffer:
                self.receive_event(received_event)
            if outcome == "confirmed":  # a transport may confirm delivery itself
                self.session.activation_delivered(pending.generation)
                self.activating, self.recovery = None, None
            # Resend what the server has not applied (speaking on the stream also proves the
            # client holds the new token); a lazy client resends from what it knew before, and
            # the server must skip the repeats.
            resend_from = pending.known_applied if lazy else pending.buffer[0].applied_client_seq
            if resend_from < self.applied:
                event("resend: repeats skipped")
            for seq in range(resend_from + 1, c.next_client_seq):
                self.send(c.sent[seq], pending.generation)
            return
        for received_event in pending.buffer[:received]:
            self.receive_event(received_event)
        c.generation = None
        assert self.session.detach(pending.generation, self.now) is True
        self.roll_back(pending.generation)
        self.detached_at = self.now

    @rule(data=st.data())
    def stale_token(self, data: st.DataObject) -> None:
        stale = sorted(set(self.issued) - self.valid_tokens())
        if not stale:
            return
        token = data.draw(st.sampled_from(stale))
        event("stale token refused")
        before = (self.session.state, self.session.generation)
        with pytest.raises(StreamRefused) as refused:
            self.session.resume(token, 0, self.now)
        assert (refused.value.status, refused.value.code) == (
            Status.NOT_FOUND,
            "session_resume_expired",
        )
        assert (self.session.state, self.session.generation) == before

    # -- time and endings --------------------------------------------------------------------

    @rule(tenths=st.integers(0, 900))
    def time_passes(self, tenths: int) -> None:
        deadline = self.deadline()
        later = self.now + tenths / 10
        if deadline is not None:
            later = max(self.now, min(later, deadline - 0.01))  # expiry is its own rule
        self.now = self.last_tick = later
        assert self.registry.tick(self.now) == []

    @precondition(mature)
    @rule(how=st.sampled_from(["deadline", "client_close", "shutdown", "engine_failure"]))
    def end_session(self, how: str) -> None:
        """One rule for every ending, so that sessions live long enough to get interesting."""
        deadline, attached = self.deadline(), self.detached_at is None
        event(f"ending: {how}")
        if how == "deadline" and deadline is not None:
            self.now = self.last_tick = deadline
            [(session, effects)] = self.registry.tick(self.now)
            assert session is self.session and effects.ended
            reason = (
                "EXPIRY_REASON_IDLE_TIMEOUT" if attached else ("EXPIRY_REASON_DISCONNECT_GRACE")
            )
            self.expect("session_expired", reason)
            assert effects.end_streams == (
                [(self.generation, "session_expired")] if attached else []
            )
            self.end("EXPIRED", discard=False)  # the registry already freed the slot
            self.deliver(effects)
        elif how == "client_close" and self.ready:
            assert self.client.generation is not None
            self.send(self.numbered("close"), self.client.generation)
        elif how == "engine_failure":
            effects = self.session.expire(pb.EXPIRY_REASON_ENGINE_FAILURE, self.now)
            self.expect("session_expired", "EXPIRY_REASON_ENGINE_FAILURE")
            assert effects.end_streams == (
                [(self.generation, "session_expired")] if attached else []
            )
            self.end("EXPIRED")
            self.deliver(effects)
        else:
            effects = self.session.close("shutdown", self.now)
            self.expect("session_closed", "shutdown")
            assert effects.end_streams == ([(self.generation, "shutdown")] if attached else [])
            self.end("CLOSED")
            self.deliver(effects)
        self.finish()

    def finish(self) -> None:
        """Checks the ended session one last time, buries it and opens the next one."""
        assert self.ending
        if self.pending is not None:  # the session ended under an activation in flight
            pending, self.pending = self.pending, None
            generation = pending.generation
            self.session.activation_delivered(generation)
            assert self.session.detach(generation, self.now) is False
            self.client.generation = generation
            for missed in pending.buffer:
                self.receive_event(missed)
            self.client.generation = None
        self.consistent()
        self.graveyard.append(
            Ended(
                self.session,
                self.client.token,
                self.client.last_seq,
                self.expected,
                self.produced_at,
                self.acked_through,
                self.now,
            )
        )
        self.open_new()

    @precondition(has_ended_sessions)
    @rule(data=st.data())
    def after_the_end(self, data: st.DataObject) -> None:
        """An ended session does nothing more, but its client may read a missed ending."""
        ended = data.draw(st.sampled_from(self.graveyard))
        s, head = ended.session, len(ended.expected)
        assert s.close("again", self.now) == Effects()
        assert s.expire(pb.EXPIRY_REASON_IDLE_TIMEOUT, self.now) == Effects()
        assert s.tick(self.now + 1e6) == Effects()
        assert s.publish(transcript("late"), self.now) == Effects()
        assert s.receive(s.generation, cmd(0, heartbeat=pb.Heartbeat()), self.now) == Effects()
        assert s.detach(s.generation, self.now) is False
        assert s.journal.head == head
        # The registry keeps an ended session for one grace, counted from its end.
        kept = ended.ended_at > self.last_tick - LIMITS.disconnect_grace_s
        cursor = ended.last_seq
        start = window_start(ended.produced_at, ended.acked_through, self.now)
        request = pb.ResumeSession(
            session_id=s.id, resume_token=ended.token, last_received_seq=cursor
        )
        for token in ("not-the-token", ended.token):
            request.resume_token = token
            if token == ended.token and kept and start <= cursor < head:
                break
            with pytest.raises(StreamRefused) as refused:
                self.registry.resume(request, self.now)
            assert (refused.value.status, refused.value.code) == (
                Status.NOT_FOUND,
                "session_resume_expired",
            )
        else:
            return
        event("resume after the end: missed events replayed")
        found, generation, effects = self.registry.resume(request, self.now)
        assert found is s and {target for target, _ in effects.sends} == {generation}
        events = [pb.ConverseResponse.FromString(payload) for _, payload in effects.sends]
        resumed = events[0].session_resumed
        assert (events[0].seq, resumed.resume_token, resumed.replayed_events) == (
            0,
            "",
            head - cursor,
        )
        assert resumed.session.state == s.state.value
        assert [e.seq for e in events[1:]] == list(range(cursor + 1, head + 1))
        assert [key(e) for e in events[1:]] == ended.expected[cursor:]
        assert effects.end_streams == [(generation, "session_ended")]
        assert not requests(effects) and not effects.ended
        ended.last_seq = head

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def consistent(self) -> None:
        # One invariant calling four checks: each invariant costs hypothesis time every step.
        self.age += 1
        self.history_is_exact()
        self.commands_apply_exactly_once()
        self.one_ending()
        self.state_agrees()

    def history_is_exact(self) -> None:
        c = self.client
        assert set(c.log) | c.lost == set(range(1, c.last_seq + 1))
        for seq, got in c.log.items():
            assert got == self.expected[seq - 1], f"seq {seq}"
        if self.ready:
            assert c.last_seq == len(self.expected)  # attached means caught up
        assert self.session.journal.head == len(self.expected)

    def commands_apply_exactly_once(self) -> None:
        assert self.engine_seqs == self.engine_expected
        assert len(set(self.engine_seqs)) == len(self.engine_seqs)
        assert self.engine_seqs == sorted(self.engine_seqs)
        assert self.session.applied_client_seq == self.applied
        if self.ready:
            assert self.applied == self.client.next_client_seq - 1

    def one_ending(self) -> None:
        endings = [k for k, _, _ in self.expected if k in TERMINAL_KINDS]
        assert len(endings) == (1 if self.ending else 0)
        assert list(self.registry) == ([self.session] if self.alive else [])

    def state_agrees(self) -> None:
        s = self.session
        state = self.ending or ("DETACHED" if self.detached_at is not None else "ATTACHED")
        assert (s.state.name, s.generation) == (state, self.generation)
        if self.alive:
            assert s.detached_at == self.detached_at
        assert s.next_deadline() == self.deadline()
        assert (s.responses.epoch, s.responses.dropped_stale_events) == (
            self.epoch,
            self.stale_drops,
        )
        # The engine here never reports speech, so the floor is the assistant's exactly while
        # a response runs.
        assert s.responses.active_response_id == self.active
        assert s.responses.turn is (
            TurnState.ASSISTANT_RESPONDING if self.active else TurnState.IDLE
        )


TestSessionMachine = SessionMachine.TestCase
TestSessionMachine.settings = settings.get_profile("omni-core-stateful")
