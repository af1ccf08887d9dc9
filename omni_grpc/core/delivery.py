"""Delivery: how a session's events reach the transport, as :class:`Effects`.

The rule held here:

* **Numbered events.** Every event of the session's history gets ``seq`` from the journal and
  the last applied ``client_seq``; stream events (created, resumed, replaced, resync, going
  away: ``STREAM_EVENTS`` in ``omni_grpc.wire.kinds``) get ``seq`` 0 and are never replayed.
  An event is journaled whether or not a stream is attached, so a resume can replay it; once
  the journal overflows, events go on unnumbered and the client is told once that it must
  start over.

Nothing here decides *whether* to send; the session does, and says to which attachment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omni_grpc.core.commands import EngineCommand
from omni_grpc.core.errors import CommandError
from omni_grpc.core.journal import Journal
from omni_grpc.wire import pb


@dataclass(slots=True)
class Effects:
    """What the transport must do after a call into the core."""

    # (attachment generation, serialized ConverseResponse), in the order to write them.
    sends: list[tuple[int, bytes]] = field(default_factory=list)
    # Commands for the engine, in order, as the session admitted them.
    engine: list[EngineCommand] = field(default_factory=list)
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


class Delivery:
    """Numbers, journals and addresses the events of one session."""

    __slots__ = ("_session_id", "journal")

    def __init__(self, session_id: str, journal: Journal) -> None:
        self._session_id = session_id
        self.journal = journal

    def emit(
        self, event: pb.ConverseResponse, *, to: int | None, applied_client_seq: int, now: float
    ) -> Effects:
        """Journals ``event`` (unless the journal overflowed) and sends it to ``to``, if any."""
        event.applied_client_seq = applied_client_seq
        journal = self.journal
        effects = Effects()
        if not journal.overflowed:
            event.seq = journal.next_seq
            payload = event.SerializeToString()
            if journal.record(payload, now):
                if to is not None:
                    effects.sends.append((to, payload))
                return effects
            # This event overflowed the journal: say so once, then go on unnumbered.
            event.seq = 0
            resync = pb.ConverseResponse(
                resync_required=pb.ResyncRequired(
                    session_id=self._session_id, reason=pb.RESYNC_REASON_JOURNAL_OVERFLOW
                ),
                applied_client_seq=applied_client_seq,
            )
            if to is not None:
                effects.sends.append((to, resync.SerializeToString()))
        if to is not None:
            effects.sends.append((to, event.SerializeToString()))
        return effects

    @staticmethod
    def send(event: pb.ConverseResponse, *, to: int, applied_client_seq: int) -> Effects:
        """Sends a stream event to ``to`` only: seq 0, never journaled, never replayed."""
        event.applied_client_seq = applied_client_seq
        return Effects(sends=[(to, event.SerializeToString())])

    def terminate(
        self,
        event: pb.ConverseResponse,
        *,
        to: int | None,
        reason: str,
        applied_client_seq: int,
        now: float,
    ) -> Effects:
        """Emits the terminal event, ends the attached stream with ``reason``, and says the
        session is over. The session calls this once: its state table has no second ending."""
        effects = self.emit(event, to=to, applied_client_seq=applied_client_seq, now=now)
        if to is not None:
            effects.end_streams.append((to, reason))
        effects.ended = True
        return effects

    def ack(self, seq: int) -> None:
        """The client has every event up to ``seq``: the journal can let them go."""
        try:
            self.journal.ack(seq)
        except ValueError as error:
            raise CommandError("invalid_event_ack", str(error), param="seq") from None
