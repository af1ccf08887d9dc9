"""The model behind the stateful test: a client, and the events a session must produce.

:class:`SessionModel` tracks, independently of the core, every numbered event the session
must have produced (kind, label, applied_client_seq), what the client received, the tokens
that must work, the deadlines, and which commands reached the engine. ``send`` and
``deliver`` feed the core and the client and check each step against the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omni_grpc.core import Effects, Limits, Registry, Session
from omni_grpc.wire import pb

from .helpers import ENGINE, cmd, handed, requests

LIMITS = Limits(disconnect_grace_s=30.0, idle_timeout_s=120.0, journal_ttl_s=60.0)
Key = tuple[str, str, int]  # (kind, label, applied_client_seq) of one numbered event


def key(event: pb.ConverseResponse) -> Key:
    kind = event.WhichOneof("event")
    assert kind is not None
    body = getattr(event, kind)
    label = {
        "input_transcription": lambda: body.transcript,
        "output_text_delta": lambda: f"{body.response_id}:{body.delta}",
        "response_created": lambda: body.response.id,
        "response_done": lambda: f"{body.response.id}:{body.response.status}",
        "error": lambda: f"{body.code}@{body.client_seq}/{body.event_id}",
        "session_closed": lambda: body.reason,
        "session_expired": lambda: pb.ExpiryReason.Name(body.reason),
        "heartbeat_ack": lambda: "",
    }[kind]()
    return kind, label, event.applied_client_seq


def window_start(produced_at: list[float], acked_through: int, now: float) -> int:
    """The oldest cursor a replay still accepts: none of what follows it was acked or aged."""
    horizon = now - LIMITS.journal_ttl_s
    pruned = max((i + 1 for i, at in enumerate(produced_at) if at < horizon), default=0)
    return max(acked_through, pruned)


@dataclass
class Client:
    token: str
    generation: int | None = 1  # the stream it reads; None while it has none
    last_seq: int = 0
    log: dict[int, Key] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)  # given up after a resync_required
    next_client_seq: int = 1
    sent: dict[int, pb.ConverseRequest] = field(default_factory=dict)
    known_applied: int = 0  # applied_client_seq of the newest event received


@dataclass
class Pending:
    """A resumed stream whose first events the client has not read yet."""

    generation: int
    known_applied: int  # what the client believed before this resume, for a lazy resend
    buffer: list[pb.ConverseResponse] = field(default_factory=list)


@dataclass
class Ended:
    """A session that ended, as its client last knew it: a tombstone it may still read."""

    session: Session
    token: str
    last_seq: int
    expected: list[Key]
    produced_at: list[float]
    acked_through: int
    ended_at: float


class SessionModel:
    """What the session must have done so far, and the client that watches it."""

    def __init__(self) -> None:
        super().__init__()  # cooperative: the state machine base class comes next
        self.now = 0.0
        self.registry = Registry(LIMITS, ENGINE)
        self.graveyard: list[Ended] = []
        self.last_tick = float("-inf")  # when the registry last buried its tombstones
        self.open_new()

    def open_new(self) -> None:
        """Opens the next session; the client starts afresh with it."""
        self.session, effects = self.registry.open(pb.OpenSession(), self.now)
        [(generation, payload)] = effects.sends
        token = pb.ConverseResponse.FromString(payload).session_created.resume_token
        assert generation == 1 and token
        self.client = Client(token=token)
        self.expected: list[Key] = []
        self.produced_at: list[float] = []
        self.applied = 0
        self.engine_seqs: list[int] = []  # client_seq of every command that reached the engine
        self.engine_expected: list[int] = []
        self.generation = 1
        self.old_generations: set[int] = set()
        self.detached_at: float | None = None
        self.last_activity = self.now
        self.acked_through = 0
        self.active = ""
        self.finished: list[str] = []
        self.counter = 0
        self.epoch = 0
        self.stale_drops = 0
        self.issued = [token]
        self.current_token = token
        self.recovery: str | None = None
        # The resume whose rotated token the client has not proved it holds yet (it proves it
        # by speaking on the new stream): generation and the token that resume presented.
        self.activating: tuple[int, str] | None = None
        self.pending: Pending | None = None
        self.ending = ""  # "CLOSED" or "EXPIRED" once over
        self.age = 0  # steps since the session opened

    @property
    def alive(self) -> bool:
        return not self.ending

    @property
    def ready(self) -> bool:
        """Attached, activated and alive: the client may send."""
        return self.alive and self.pending is None and self.client.generation is not None

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def expect(self, kind: str, label: str) -> None:
        self.expected.append((kind, label, self.applied))
        self.produced_at.append(self.now)

    def deadline(self) -> float | None:
        if self.ending:
            return None
        if self.detached_at is not None:
            return self.detached_at + LIMITS.disconnect_grace_s
        return None if self.active else self.last_activity + LIMITS.idle_timeout_s

    def window_start(self) -> int:
        return window_start(self.produced_at, self.acked_through, self.now)

    def valid_tokens(self) -> set[str]:
        valid = {self.current_token}
        if self.recovery is not None and self.detached_at is not None:
            valid.add(self.recovery)
        return valid

    def roll_back(self, generation: int) -> None:
        """The stream of an unconfirmed resume went away: its presented token works again."""
        if self.activating is not None and self.activating[0] == generation:
            self.recovery, self.activating = self.activating[1], None

    def end(self, state: str, discard: bool = True) -> None:
        assert not self.ending
        self.ending, self.activating = state, None
        if discard:
            self.registry.discard(self.session)  # the transport's job when `ended` is set

    def deliver(self, effects: Effects) -> None:
        self.engine_seqs += [command.client_seq for _, command in requests(effects)]
        for generation, payload in effects.sends:
            event = pb.ConverseResponse.FromString(payload)
            if self.pending is not None and generation == self.pending.generation:
                self.pending.buffer.append(event)
            elif generation == self.client.generation:
                self.receive_event(event)
            else:  # a replaced stream hears that it was replaced, and nothing else
                assert generation in self.old_generations
                assert (event.seq, event.WhichOneof("event")) == (0, "session_replaced")
        for generation, reason in effects.end_streams:
            if reason == "session_replaced":
                assert generation in self.old_generations
            else:
                assert effects.ended and generation == self.generation
        if effects.ended and self.client.generation is not None:
            self.client.generation = None  # the server ended the stream

    def receive_event(self, event: pb.ConverseResponse) -> None:
        c = self.client
        if event.seq == 0:
            assert event.WhichOneof("event") == "session_resumed"
            c.token = event.session_resumed.resume_token
        else:
            assert event.seq == c.last_seq + 1, f"seq {event.seq} after {c.last_seq}"
            c.last_seq = event.seq
            c.log[event.seq] = key(event)
        c.known_applied = event.applied_client_seq

    def send(self, request: pb.ConverseRequest, generation: int) -> None:
        """Delivers one command on the current stream and predicts exactly what it does."""
        effects = self.session.receive(generation, request, self.now)
        if self.activating is not None and self.activating[0] == generation:
            self.activating, self.recovery = None, None  # it spoke: it has the new token
        seq, kind, eid = request.client_seq, request.WhichOneof("command"), request.event_id
        self.last_activity = self.now
        forwarded = []
        if seq and seq <= self.applied:
            assert effects == Effects()  # a resend of an applied command does nothing at all
        elif seq and seq != self.applied + 1:
            self.expect("error", f"client_seq_gap@{seq}/{eid}")
        else:
            self.applied = seq or self.applied
            if kind == "append_input_text":
                forwarded = [handed(request)]
                self.engine_expected.append(seq)
            elif kind == "heartbeat":
                self.expect("heartbeat_ack", "")
            elif kind == "ack_events" and request.ack_events.seq > len(self.expected):
                self.expect("error", f"invalid_event_ack@{seq}/{eid}")
            elif kind == "ack_events":
                self.acked_through = max(self.acked_through, request.ack_events.seq)
            elif kind == "retrieve_conversation_item":
                self.expect("error", f"missing_item_id@{seq}/{eid}")
            elif kind == "close_session":
                self.expect("session_closed", "client_close")
                assert effects.end_streams == [(generation, "client_close")]
                self.end("CLOSED")
        self.deliver(effects)
        assert requests(effects) == forwarded

    def numbered(self, kind: str) -> pb.ConverseRequest:
        c = self.client
        seq, eid = c.next_client_seq, f"e{c.next_client_seq}"
        request = {
            "text": lambda: cmd(seq, eid, append_input_text=pb.AppendInputText(text=eid)),
            "heartbeat": lambda: cmd(seq, eid, heartbeat=pb.Heartbeat()),
            "invalid": lambda: cmd(
                seq, eid, retrieve_conversation_item=(pb.RetrieveConversationItem())
            ),
            "close": lambda: cmd(seq, eid, close_session=pb.CloseSession()),
        }[kind]()
        c.sent[seq] = request
        c.next_client_seq += 1
        return request
