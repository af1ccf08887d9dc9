"""A session as plain data for a store outside the process, and a session rebuilt from it.

A replica that keeps its sessions durable (``omni_grpc/server/durable.py``) writes, behind each
event, a :class:`SessionState` and the journal's entries not yet acknowledged. When that replica
is gone (killed, or draining), another one rebuilds the session from them: :func:`adopt`. Only
plain values cross this boundary (bytes, ints, strings), so the store needs nothing of the
core's classes and the core nothing of the store. The rules held here:

* **Adopted, detached.** The rebuilt session is DETACHED (its stream died with its owner) with
  the stored generation, key digest and token digests, so the client's own resume, with the
  token it holds, is what attaches it again, and nobody else's.
* **No response survives its engine.** A response that was running on the lost replica cannot
  go on: its engine state is gone. The adopted session ends it with ``response_done``, status
  FAILED and the typed reason ``session_moved``, journaled, so the resume replays it.
* **The input goes with its number.** The client's audio not yet committed lives in the
  engine's buffer, not in the core: the store keeps it beside the state (the server's
  business), and the state keeps the core's ledger of it (``pending_input_bytes``), so the
  adopted session holds, in its budget, what the adopter replays into its fresh engine. The
  stored ``applied_client_seq`` never covers an effect the store cannot reproduce.
* **Never silent loss.** Events the lost replica numbered but did not get into the store in
  time are events the client may hold and the store does not: a resume whose cursor is past
  the stored journal is told ``resync_required`` (:func:`check_adopted_cursor`), never
  answered as if nothing were missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from omni_grpc.core.budget import MemoryBudget
from omni_grpc.core.credentials import SessionLock
from omni_grpc.core.delivery import Effects
from omni_grpc.core.limits import EngineFeatures, Limits
from omni_grpc.core.responses import TurnState
from omni_grpc.core.session import ResumeGap, Session
from omni_grpc.core.state import State
from omni_grpc.wire import pb

MOVED_REASON = "session_moved"  # the status_reason of a response its replica took with it


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionState:
    """What a store keeps of one session besides its journal entries."""

    session_id: str
    config: bytes  # the SessionConfig in force, serialized
    owner_digest: bytes
    token_digest: bytes
    recovery_digest: bytes  # b"" when only the current token works
    generation: int
    applied_client_seq: int
    dropped_through: int  # the journal's entries after this are stored
    head: int  # the newest seq numbered when this state was taken
    overflowed: bool
    active_response_id: str
    turn: str  # the TurnState's name
    epoch: int
    pending_input_bytes: int = 0  # the admission ledger of the uncommitted input

    def to_fields(self) -> dict[str, bytes]:
        """The state as a flat mapping of bytes (one hash in a key-value store)."""
        return {
            "id": self.session_id.encode(),
            "config": self.config,
            "owner": self.owner_digest,
            "token": self.token_digest,
            "recovery": self.recovery_digest,
            "generation": b"%d" % self.generation,
            "applied": b"%d" % self.applied_client_seq,
            "dropped": b"%d" % self.dropped_through,
            "head": b"%d" % self.head,
            "overflowed": b"1" if self.overflowed else b"0",
            "response": self.active_response_id.encode(),
            "turn": self.turn.encode(),
            "epoch": b"%d" % self.epoch,
            "pending": b"%d" % self.pending_input_bytes,
        }

    @classmethod
    def from_fields(cls, fields: dict[bytes, bytes]) -> SessionState:
        """Reads :meth:`to_fields` back; raises KeyError or ValueError for a broken record."""
        return cls(
            session_id=fields[b"id"].decode(),
            config=fields[b"config"],
            owner_digest=fields[b"owner"],
            token_digest=fields[b"token"],
            recovery_digest=fields[b"recovery"],
            generation=int(fields[b"generation"]),
            applied_client_seq=int(fields[b"applied"]),
            dropped_through=int(fields[b"dropped"]),
            head=int(fields[b"head"]),
            overflowed=fields[b"overflowed"] == b"1",
            active_response_id=fields[b"response"].decode(),
            turn=fields[b"turn"].decode(),
            epoch=int(fields[b"epoch"]),
            # Absent in a record written before the input was kept: nothing pending.
            pending_input_bytes=int(fields.get(b"pending", b"0")),
        )


def export_state(session: Session) -> SessionState:
    """Takes the storable state of ``session`` now."""
    token, recovery = session.lock.resume.sealed()
    return SessionState(
        session_id=session.id,
        config=session.config.SerializeToString(),
        owner_digest=session.lock.owner_digest,
        token_digest=token,
        recovery_digest=recovery,
        generation=session.generation,
        applied_client_seq=session.applied_client_seq,
        dropped_through=session.journal.dropped_through,
        head=session.journal.head,
        overflowed=session.journal.overflowed,
        active_response_id=session.responses.active_response_id,
        turn=session.responses.turn.name,
        epoch=session.responses.epoch,
        pending_input_bytes=session.admission.pending_input_bytes,
    )


def adopt(
    state: SessionState,
    entries: list[tuple[int, bytes]],
    *,
    limits: Limits,
    engine: EngineFeatures,
    capabilities: pb.Capabilities,
    now: float,
    budget: MemoryBudget | None = None,
) -> tuple[Session, Effects]:
    """Rebuilds a stored session, detached; the effects journal the end of a cut response.

    Raises ValueError when the stored entries are not contiguous.
    """
    session = Session(
        session_id=state.session_id,
        config=pb.SessionConfig.FromString(state.config),
        limits=limits,
        engine=engine,
        capabilities=capabilities,
        now=now,
        budget=budget,
    )
    session.lock = SessionLock.unseal(state.owner_digest, state.token_digest, state.recovery_digest)
    session.generation = state.generation
    session.state = State.DETACHED
    session.detached_at = now
    session.admission.applied_client_seq = state.applied_client_seq
    session.admission.restore_pending(state.pending_input_bytes)
    session.responses.turn = TurnState[state.turn]
    session.responses.epoch = state.epoch
    session.journal.restore(state.dropped_through, entries, now)
    session.journal.overflowed = state.overflowed
    if not state.active_response_id:
        return session, Effects()
    session.responses.active_response_id = state.active_response_id
    cut = pb.Response(
        id=state.active_response_id,
        status=pb.RESPONSE_STATUS_FAILED,
        status_reason=MOVED_REASON,
    )
    return session, session.publish(
        pb.ConverseResponse(response_done=pb.ResponseDone(response=cut)), now
    )


def check_adopted_cursor(session: Session, last_seq: int) -> None:
    """Raises ResumeGap when the client holds events the store never got (see the module)."""
    if last_seq <= session.journal.head:
        return
    event = pb.ConverseResponse(
        resync_required=pb.ResyncRequired(
            session_id=session.id, reason=pb.RESYNC_REASON_JOURNAL_GAP
        ),
        applied_client_seq=session.applied_client_seq,
    )
    raise ResumeGap(
        event.SerializeToString(),
        f"seq {last_seq} was never stored (the store holds up to {session.journal.head})",
    )
