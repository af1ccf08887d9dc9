"""All sessions of one server: opening (capacity and drain), lookup, resume and expiry.

The registry allocates session ids (never reused: 128 random bits), refuses an open beyond
``max_sessions`` with a retryable ``resource_exhausted`` so clients back off instead of
hammering, and finds the session a resume names. A session keeps its slot until it ends; the
transport calls :meth:`Registry.discard` when an effect says it ended.

Each session belongs to the API key that opened it (``key``; empty when the server has no
keys). A resume or lookup that names an unknown id is refused exactly as one that names
another key's session or brings a wrong token: the same answer, after the same digests and
comparisons against a decoy lock (see ``credentials.py``), so no probe learns which ids exist.

An ended session frees its slot at once but stays findable for one disconnect grace, as a
*tombstone*: a client whose stream broke just as the session ended (a close it asked for, an
expiry) can still resume and read the events it missed, the terminal one included. Without
that, "every session ends with exactly one terminal event" would hold on the server and not on
the client.
"""

from __future__ import annotations

import collections
import secrets
from collections.abc import Iterator

from omni_grpc.core.budget import MemoryBudget
from omni_grpc.core.config import resolve_config, resolve_recording
from omni_grpc.core.credentials import SessionLock
from omni_grpc.core.delivery import Effects
from omni_grpc.core.errors import CommandError, Status, StreamRefused
from omni_grpc.core.limits import EngineFeatures, Limits, capabilities
from omni_grpc.core.session import Session, resume_refused
from omni_grpc.wire import pb


class Registry:
    """Owns every live session of a server."""

    def __init__(self, limits: Limits, engine: EngineFeatures) -> None:
        self.limits = limits
        self.engine = engine
        self.capabilities = capabilities(limits, engine)
        # Input audio and queued output of every session together (see budget.py).
        self.budget = MemoryBudget(limits.memory_budget_bytes)
        self._sessions: dict[str, Session] = {}
        self._ended: collections.OrderedDict[str, Session] = collections.OrderedDict()
        self.accepting = True
        # This server's routing key behind a proxy ("" for a single server): every session it
        # hosts tells its client, in session_created and session_resumed.
        self.route = ""
        # The server's recording policy (config.RECORDING_POLICIES): each session's
        # configuration in force says whether it is recorded.
        self.recording = "off"
        self._decoy = SessionLock.decoy()  # checked in place of an unknown session's lock

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))  # a copy: ending a session frees its slot

    def open(
        self,
        request: pb.OpenSession,
        now: float,
        *,
        key: str = "",
        session_id: str = "",
        carried: SessionLock | None = None,
    ) -> tuple[Session, Effects]:
        """Admits and creates a session owned by API ``key``; raises StreamRefused when it
        cannot.

        A session that waited for room (``session_queue.py``) opens with the id it waited
        under, and ``carried``, the lock of its wait, whose token resumes it until the client
        speaks (it may never have seen the session's own).
        """
        self._check_room()
        config = self.check_open(request)
        resolve_recording(config, self.recording)
        session = Session(
            session_id=session_id or "sess_" + secrets.token_hex(16),
            config=config,
            limits=self.limits,
            engine=self.engine,
            capabilities=self.capabilities,
            now=now,
            owner_key=key,
            budget=self.budget,
        )
        session.route = self.route
        session.recording = self.recording
        self._sessions[session.id] = session
        return session, session.created(carried)

    def check_open(self, request: pb.OpenSession) -> pb.SessionConfig:
        """The configuration an open would have; raises StreamRefused as the open would, for
        a bad configuration or a draining server (not for a full one)."""
        if not self.accepting:
            raise self.draining_refusal()
        try:
            return resolve_config(request.config, self.limits, self.engine)
        except CommandError as error:
            raise StreamRefused(Status.INVALID_ARGUMENT, error.code, error.message) from None

    def draining_refusal(self) -> StreamRefused:
        """How a draining server refuses a new session."""
        return StreamRefused(
            Status.UNAVAILABLE,
            "server_shutting_down",
            "the server is draining; try another one",
            retryable=True,
            retry_after_s=self.limits.open_retry_after_s,
        )

    def _check_room(self) -> None:
        """Refuses a new session here (opened or adopted) while draining or when full."""
        if not self.accepting:
            raise self.draining_refusal()
        if len(self._sessions) >= self.limits.max_sessions:
            raise StreamRefused(
                Status.RESOURCE_EXHAUSTED,
                "resource_exhausted",
                f"session capacity exhausted: limit={self.limits.max_sessions}",
                retryable=True,
                retry_after_s=self.limits.open_retry_after_s,
            )

    def knows(self, session_id: str) -> bool:
        """Says whether the session lives here, or ended here lately (a tombstone)."""
        return session_id in self._sessions or session_id in self._ended

    def take(self, session: Session) -> None:
        """Hosts a session rebuilt elsewhere (``snapshot.adopt``); raises StreamRefused when
        there is no room or the server is draining, as an open would be refused."""
        self._check_room()
        session.route = self.route  # its resumes name this server now
        session.recording = self.recording
        self._sessions[session.id] = session

    def resume(
        self, request: pb.ResumeSession, now: float, *, key: str = ""
    ) -> tuple[Session, int, Effects]:
        """Reattaches a session of API ``key``; raises StreamRefused or ResumeGap when it
        cannot."""
        if not request.session_id or not request.resume_token:
            raise StreamRefused(
                Status.INVALID_ARGUMENT,
                "invalid_session_resume",
                "resume needs session_id and resume_token",
            )
        session = self._sessions.get(request.session_id) or self._ended.get(request.session_id)
        if session is None:
            self._decoy.opens(key, request.resume_token, attached=False)  # the same work
            raise resume_refused()
        generation, effects = session.resume(
            request.resume_token, request.last_received_seq, now, key=key
        )
        return session, generation, effects

    def lookup(self, session_id: str, token: str, *, key: str = "") -> Session:
        """Finds a live session of API ``key`` for a read-only query; the token must be its
        current one."""
        session = self._sessions.get(session_id)
        lock = self._decoy if session is None else session.lock
        readable = lock.reads(key, token)  # checked for unknown ids too: the same work
        if session is None or not readable:
            # One answer for all three, so a probe cannot learn which session ids exist.
            raise StreamRefused(
                Status.NOT_FOUND, "session_not_found", "unknown session or wrong token"
            )
        return session

    def discard(self, session: Session) -> None:
        """Frees the slot of a session that ended; it stays resumable as a tombstone."""
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
            self._ended[session.id] = session
            while len(self._ended) > self.limits.max_sessions:
                self._ended.popitem(last=False)

    def forget(self, session: Session) -> None:
        """Lets a live session go without a tombstone: another server hosts it now."""
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]

    def _bury(self, now: float) -> None:
        horizon = now - self.limits.disconnect_grace_s
        while self._ended:
            oldest = next(iter(self._ended.values()))
            if oldest.ended_at is not None and oldest.ended_at > horizon:
                break
            self._ended.popitem(last=False)

    def tick(self, now: float) -> list[tuple[Session, Effects]]:
        """Expires every session whose deadline passed and frees their slots."""
        self._bury(now)
        expired = []
        for session in list(self._sessions.values()):
            effects = session.tick(now)
            if effects.ended:
                self.discard(session)
                expired.append((session, effects))
        return expired

    def next_deadline(self) -> float | None:
        """The earliest deadline of any session."""
        deadlines = [d for s in self._sessions.values() if (d := s.next_deadline()) is not None]
        return min(deadlines, default=None)
