"""What lets a relay outlive its service replica: the commands not yet applied, the cursor, the
token.

A bridge in a process of its own (``omni-grpc bridge``, the cluster's bridges) reaches the
service through a proxy. When the replica that owns a session dies, the proxy drops the stream
with no word from the service, but the websocket (or the call) to the client is still there. A
stock client cannot resume a session itself, and an extension client cannot know which of its
frames the dead replica applied: the bridge numbers the commands (``client_seq`` is never the
JSON client's business), so the bridge must be the one to make them exact. It does what the
Python client does (:mod:`omni_grpc.client.link`): it keeps each numbered command until an event
says the service applied it (every event carries ``applied_client_seq``, and with durable
sessions that number covers only what a new owner can reproduce), resumes the session on a new
stream from the last event it passed on, sends again exactly the commands above the number the
resume reports, and goes on. The client sees the events it missed, in order, and nothing else;
an extension client also gets ``session.resumed`` with the rotated token, as on its own resume.

Appends make no events, so nothing would say how far the service got: every
``PROBE_EVERY`` unconfirmed commands the relay sends a heartbeat, whose answer carries the
number. The journal is bounded (:data:`MAX_COMMANDS`, :data:`MAX_BYTES`); when it is full the
relay asks how far the service got and reads no more frames until it confirms some, so a client
that outruns the service meets TCP's flow control, as it would at the service.
"""

from __future__ import annotations

import asyncio

from omni_grpc.client.bookkeeping import CommandJournal
from omni_grpc.wire import pb

MAX_COMMANDS = 256
MAX_BYTES = 2 * 1024 * 1024  # about 20 s of 24 kHz PCM, far beyond one probe's round trip
PROBE_EVERY = 32  # unconfirmed commands between two heartbeats (3.2 s of 100 ms appends)
# How many times a lost stream is resumed before the client is told the service is gone, and
# how long apart when the service gave no hint (a peer adopts a dead owner's session once its
# lease lapses, a few seconds; a restarted replica takes longer on a loaded machine).
REJOIN_ATTEMPTS = 120
REJOIN_RETRY_S = 0.25

HEARTBEAT = pb.ConverseRequest(heartbeat=pb.Heartbeat())


class Rejoin:
    """One relay's journal of unconfirmed commands, its event cursor and its resume token."""

    __slots__ = ("_journal", "_room", "last_seq", "token")

    def __init__(self, applied: int, last_seq: int) -> None:
        self._journal = CommandJournal(
            max_commands=MAX_COMMANDS, max_bytes=MAX_BYTES, next_seq=applied + 1
        )
        self._room = asyncio.Event()
        self.last_seq = last_seq  # the newest numbered event the client has (or had, resuming)
        self.token = ""  # the session's resume token, as last rotated

    def full_for(self, request: pb.ConverseRequest) -> bool:
        """Whether ``request`` must wait for the service to confirm older commands."""
        return not self._journal.has_room(request.ByteSize())

    async def room_for(self, request: pb.ConverseRequest) -> None:
        """Waits until ``request`` fits (the caller has asked how far the service got)."""
        while self.full_for(request):
            self._room.clear()
            await self._room.wait()

    def number(self, request: pb.ConverseRequest) -> bool:
        """Numbers ``request`` and keeps it until applied (CommandJournalFull if it does not
        fit); says whether a heartbeat should follow it, to learn how far the service got."""
        self._journal.number(request)
        return len(self._journal) % PROBE_EVERY == 0

    def delivered(self, response: pb.ConverseResponse, kind: str | None = None) -> None:
        """Notes what an event from the service says: how far it applied, where the client's
        cursor is, and a rotated token (``kind``: the event's, where the caller has it)."""
        if self._journal.trim(response.applied_client_seq):
            self._room.set()
        if response.seq:
            self.last_seq = response.seq
        kind = kind or response.WhichOneof("event")
        if kind == "session_created":
            self.token = response.session_created.resume_token
        elif kind == "session_resumed" and response.session_resumed.resume_token:
            self.token = response.session_resumed.resume_token

    def resume(self, session_id: str) -> pb.ConverseRequest:
        """The first request of the stream that takes the session back."""
        resume = pb.ResumeSession(
            session_id=session_id, resume_token=self.token, last_received_seq=self.last_seq
        )
        return pb.ConverseRequest(resume_session=resume)

    def unapplied(self, applied: int) -> list[pb.ConverseRequest]:
        """The commands to send again after a resume that reports ``applied`` (raises
        ValueError if the service claims more than was ever sent)."""
        pending = self._journal.pending_after(applied)
        self._room.set()
        return pending
