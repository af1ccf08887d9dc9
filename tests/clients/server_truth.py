"""What the server did, recorded from inside it, to judge clients written in other languages.

A client under test reports what it received and sent; these tests believe the server instead.
:class:`ServerTruth` wraps the registry (sessions opened, resumes granted), the journal (every
numbered event, as the bytes sent) and the loopback engine's input (every command that reached
it), the way the chaos test does; and the routing key (``x-omni-route``) each Converse call
presented.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from omni_grpc.core.commands import EngineCommand
from omni_grpc.core.journal import Journal
from omni_grpc.core.registry import Registry
from omni_grpc.engine.loopback.session import LoopbackSession
from omni_grpc.server.servicer import DuplexServicer
from omni_grpc.wire import pb
from omni_grpc.wire.keys import route_of


class ServerTruth:
    """Sessions opened and resumed, events journaled, and commands the engine received."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opened: list[str] = []
        self.resumes: dict[str, int] = defaultdict(int)
        self._journals: dict[str, Journal] = {}
        self._journaled: dict[int, list[bytes]] = defaultdict(list)
        self.engine_input: dict[str, list[EngineCommand]] = defaultdict(list)
        # How many commands the engine had received when each resume was granted: where a cut
        # fell, read at the moment that counts (a test polling for the cut reads it later, by
        # which time a quick client may have resent everything).
        self.input_at_resume: dict[str, list[int]] = defaultdict(list)
        self.call_routes: list[str] = []  # the x-omni-route of each Converse call, in order
        record, open_session, resume = Journal.record, Registry.open, Registry.resume
        submit, submit_now = LoopbackSession.submit, LoopbackSession.submit_now
        converse = DuplexServicer.converse

        def recording(journal: Journal, payload: bytes, now: float) -> bool:
            kept = record(journal, payload, now)
            if kept:
                self._journaled[id(journal)].append(payload)
            return kept

        def opening(registry: Registry, request: pb.OpenSession, now: float, **kw: Any) -> Any:
            session, effects = open_session(registry, request, now, **kw)
            self.opened.append(session.id)
            self._journals[session.id] = session.journal
            return session, effects

        def resuming(registry: Registry, request: pb.ResumeSession, now: float, **kw: Any) -> Any:
            granted = resume(registry, request, now, **kw)  # raises when refused
            self.resumes[request.session_id] += 1
            self.input_at_resume[request.session_id].append(
                len(self.engine_input[request.session_id])
            )
            return granted

        async def submitting(session: LoopbackSession, command: EngineCommand) -> None:
            self.engine_input[session.id].append(command)
            await submit(session, command)

        def applying_now(
            session: LoopbackSession, command: EngineCommand
        ) -> list[pb.ConverseResponse] | None:
            # The fast path: a command the engine applied at once reached it here instead.
            made = submit_now(session, command)
            if made is not None:
                self.engine_input[session.id].append(command)
            return made

        async def conversing(servicer: DuplexServicer, requests: Any, context: Any) -> None:
            self.call_routes.append(route_of(tuple(context.invocation_metadata() or ())))
            await converse(servicer, requests, context)

        monkeypatch.setattr(Journal, "record", recording)
        monkeypatch.setattr(DuplexServicer, "converse", conversing)
        monkeypatch.setattr(Registry, "open", opening)
        monkeypatch.setattr(Registry, "resume", resuming)
        monkeypatch.setattr(LoopbackSession, "submit", submitting)
        monkeypatch.setattr(LoopbackSession, "submit_now", applying_now)

    def events(self, session_id: str) -> list[pb.ConverseResponse]:
        """Every event the session journaled, in seq order."""
        payloads = self._journaled[id(self._journals[session_id])]
        return [pb.ConverseResponse.FromString(payload) for payload in payloads]

    def reply_audio(self, session_id: str) -> bytes:
        """The output audio the session journaled, in order."""
        return b"".join(
            event.output_audio_delta.audio
            for event in self.events(session_id)
            if event.WhichOneof("event") == "output_audio_delta"
        )
