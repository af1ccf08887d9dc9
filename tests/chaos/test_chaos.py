"""Chaos: a proxy cuts connections at random points while many sessions talk and get answers.

Twenty-four sessions stream audio in turns through a TCP proxy that kills connections at random
(mid-message, during resumes, during takeovers), and four of them are taken over half-way by a
second client. The second client connects straight to the server: two clients holding the same
token race for the session, and a takeover whose own activation is cut hands the recovery token
back to the old owner, which is right but makes the outcome a coin toss. The old client's
connection is still cut at random around the takeover. Afterwards, for every session:

* what its clients received is exactly what the server journaled: the same bytes, in order,
  with no duplicate on any one client and nothing missing;
* every command a client got confirmed reached the engine exactly once, numbered 1, 2, 3 … with
  no gap (nothing applied twice, nothing lost);
* every turn's answer has exactly the audio of its turn: no chunk doubled or dropped.

The server's journal and the engine's input are recorded by wrapping them, so the truth comes
from the server, not from the clients being tested.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from omni_grpc.client import (
    ClientOptions,
    DuplexClient,
    ReconnectPolicy,
    ResumeRefused,
    SessionReplaced,
)
from omni_grpc.client.recordings import RecordingError, load
from omni_grpc.core import Limits
from omni_grpc.core.commands import EngineCommand, kind_of
from omni_grpc.core.journal import Journal
from omni_grpc.core.registry import Registry
from omni_grpc.engine.loopback.session import LoopbackSession
from omni_grpc.server.app import RunningServer
from omni_grpc.server.recording import RecordSettings
from omni_grpc.wire import pb
from tests.client.conftest import CONFIG, tone
from tests.client.proxy import ChaosProxy
from tests.serving import eventually, serving, settings

SESSIONS = 24
TAKEOVERS = 4
TURNS = 3
CHUNKS_PER_TURN = 8
CHUNK_MS = 20
PATIENT = ReconnectPolicy(
    initial_backoff_s=0.01, max_backoff_s=0.2, max_attempts=200, max_elapsed_s=40.0
)
OPTIONS = ClientOptions(reconnect=PATIENT, open_retry=PATIENT, ack_every_events=16)


class Truth:
    """What the server journaled and what reached the engine, per session."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.journals: dict[str, Journal] = {}
        self.journaled: dict[int, list[bytes]] = defaultdict(list)
        self.engine_input: dict[str, list[tuple[int, str]]] = defaultdict(list)
        self.recordings = Path()  # where the server recorded every session
        record, open_session, submit = Journal.record, Registry.open, LoopbackSession.submit
        submit_now = LoopbackSession.submit_now

        def recording(journal: Journal, payload: bytes, now: float) -> bool:
            kept = record(journal, payload, now)
            if kept:
                self.journaled[id(journal)].append(payload)
            return kept

        def opening(registry: Registry, request: pb.OpenSession, now: float, **kw: Any):  # type: ignore[no-untyped-def]
            session, effects = open_session(registry, request, now, **kw)
            self.journals[session.id] = session.journal
            return session, effects

        async def submitting(session: LoopbackSession, command: EngineCommand) -> None:
            self.engine_input[session.id].append((command.client_seq, kind_of(command)))
            await submit(session, command)

        def applying_now(
            session: LoopbackSession, command: EngineCommand
        ) -> list[pb.ConverseResponse] | None:
            # The fast path: a command the engine applied at once reached it here instead.
            made = submit_now(session, command)
            if made is not None:
                self.engine_input[session.id].append((command.client_seq, kind_of(command)))
            return made

        monkeypatch.setattr(Journal, "record", recording)
        monkeypatch.setattr(Registry, "open", opening)
        monkeypatch.setattr(LoopbackSession, "submit", submitting)
        monkeypatch.setattr(LoopbackSession, "submit_now", applying_now)

    def events(self, session_id: str) -> list[bytes]:
        return self.journaled[id(self.journals[session_id])]


@pytest.fixture
async def chaos(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> AsyncIterator[tuple[Truth, RunningServer, ChaosProxy]]:
    truth = Truth(monkeypatch)
    truth.recordings = tmp_path  # every session recorded (--record all), checked after
    recording = RecordSettings(policy="all", folder=tmp_path)
    async with (
        serving(settings(limits=Limits(disconnect_grace_s=30.0), recording=recording)) as running,
        ChaosProxy("127.0.0.1", running.grpc_port, seed=7) as proxy,
    ):
        yield truth, running, proxy


class Talker:
    """One session's client side: turns of audio, and everything it was told."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.received: list[list[pb.ConverseResponse]] = [[]]  # one list per client
        self.answers_ms: list[float] = []
        self.sent_turn_ms = CHUNKS_PER_TURN * CHUNK_MS
        self.client: DuplexClient | None = None
        self.stale_handles = 0

    async def open(self, target: str) -> None:
        # Sessions open before the cuts start: an open that is cut after the server created
        # the session cannot be told from one that never arrived, so a retry would leave an
        # orphan behind (it expires after its grace, but this test counts sessions).
        self.client = await DuplexClient.connect(target, config=CONFIG, options=OPTIONS)

    async def talk(self, target: str, takeover: str | None) -> None:
        assert self.client is not None
        rng = random.Random(self.index)
        for turn in range(TURNS):
            if takeover and turn == 1:
                await self._take_over(takeover)
            for chunk in range(CHUNKS_PER_TURN):
                await self.client.append_audio(tone(CHUNK_MS, freq_hz=200 + 10 * chunk))
                await asyncio.sleep(rng.uniform(0, 0.01))
            await self.client.commit(create_response=True)
            await self._read_until_done()
        await self.client.close()
        await self._read_rest()

    async def _take_over(self, target: str) -> None:
        assert self.client is not None
        old = self.client
        for _ in range(50):
            # The old client keeps resuming through the cuts too, and each of its resumes
            # rotates the token: a handle can go stale before the takeover lands. The server
            # is right to refuse it; the new owner asks for a fresh handle, as a real one would.
            handle = old.resume_handle()
            try:
                self.client = await DuplexClient.resume(
                    target,
                    handle.session_id,
                    handle.resume_token,
                    handle.last_seq,
                    options=OPTIONS,
                    route=handle.route,  # through a proxy, straight to the session's replica
                )
                break
            except ResumeRefused as refused:
                assert refused.status == grpc.StatusCode.NOT_FOUND, refused
                self.stale_handles += 1
                await asyncio.sleep(0.02)
        else:
            raise AssertionError("no takeover succeeded")
        # The old client learns it lost the session: told so (session_replaced), or, if a cut
        # swallowed that, refused when it tries to resume with its superseded token.
        with pytest.raises((SessionReplaced, ResumeRefused)) as lost:
            async with asyncio.timeout(
                20,
            ) as limit:
                self.old = old
                del limit
                async for event in old.events():
                    self.received[-1].append(event)
        if isinstance(lost.value, ResumeRefused):
            assert lost.value.status == grpc.StatusCode.NOT_FOUND, lost.value
        await old.close()
        self.received.append([])

    async def _read_until_done(self) -> None:
        assert self.client is not None
        stream = self.client.events()
        async with asyncio.timeout(40):
            async for event in stream:
                self.received[-1].append(event)
                if event.WhichOneof("event") == "response_done":
                    self.answers_ms.append(event.response_done.response.usage.output_audio_ms)
                    break
        await stream.aclose()

    async def _read_rest(self) -> None:
        assert self.client is not None
        async with asyncio.timeout(10):
            async for event in self.client.events():
                self.received[-1].append(event)


async def test_random_cuts_lose_nothing_and_double_nothing(chaos) -> None:  # type: ignore[no-untyped-def]
    truth, running, proxy = chaos
    talkers = [Talker(i) for i in range(SESSIONS)]
    await asyncio.gather(*(t.open(proxy.target) for t in talkers))
    proxy.cut_randomly(mean_bytes=60_000)  # also cut mid-message
    proxy.start_random_cuts(0.05, 0.25)
    try:
        await asyncio.gather(
            *(
                t.talk(proxy.target, running.target if t.index < TAKEOVERS else None)
                for t in talkers
            )
        )
    finally:
        await proxy.stop_random_cuts()
        proxy.cut_randomly(None)
    assert proxy.stats.cuts >= 10, "the proxy hardly cut anything: the test proved little"
    reconnects = sum(t.client.stats.reconnects for t in talkers if t.client)
    assert reconnects >= 10
    check_sessions(truth, talkers)
    assert len(running.registry) == 0  # every session closed exactly once and let go
    await eventually(lambda: recordings_ended(truth, talkers), timeout_s=30)
    check_recordings(truth, talkers)


def check_sessions(truth: Truth, talkers: list[Talker]) -> None:
    """What every session's clients received is what its server journaled, whole and once;
    every command reached the engine once; every answer has its turn's audio."""
    for talker in talkers:
        assert talker.client is not None
        session_id = talker.client.session_id
        journal = truth.events(session_id)
        seqs_seen: set[int] = set()
        for received in talker.received:
            numbered = [e for e in received if e.seq]
            seqs = [e.seq for e in numbered]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), (session_id, seqs)
            assert [e.SerializeToString() for e in numbered] == journal[seqs[0] - 1 : seqs[-1]]
            seqs_seen.update(seqs)
        # Together the clients saw every journaled event, the terminal one included.
        missing = sorted(set(range(1, len(journal) + 1)) - seqs_seen)
        assert not missing, (
            talker.index,
            len(journal),
            [
                (seq, pb.ConverseResponse.FromString(journal[seq - 1]).WhichOneof("event"))
                for seq in missing
            ],
            [[e.seq for e in r] for r in talker.received],
        )
        assert talker.received[-1][-1].WhichOneof("event") == "session_closed"
        commands = [seq for seq, _ in truth.engine_input[session_id]]
        assert commands == list(range(1, len(commands) + 1)), (session_id, commands)
        kinds_in = [kind for _, kind in truth.engine_input[session_id]]
        assert kinds_in.count("commit_input_audio") == TURNS
        assert kinds_in.count("append_input_audio") == TURNS * CHUNKS_PER_TURN
        assert talker.answers_ms == [pytest.approx(talker.sent_turn_ms, abs=1)] * TURNS


def recordings_ended(truth: Truth, talkers: list[Talker]) -> bool:
    """Whether the writer has finished every session's recording (its first part's last line,
    ``end``, made from its wire log)."""
    return all(
        _first_part_ended(truth.recordings / t.client.session_id)
        for t in talkers
        if t.client is not None
    )


def _first_part_ended(folder: Path) -> bool:
    try:
        lines = load(folder).parts[0].lines
    except RecordingError:
        return False
    return bool(lines) and lines[-1]["type"] == "end"


def check_recordings(truth: Truth, talkers: list[Talker]) -> None:
    """Every session's recording holds each journaled event once, in order, with the bytes
    the journal numbered (audio by length), across the cuts, resumes and takeovers; and
    each command the engine got once."""
    for talker in talkers:
        assert talker.client is not None
        session_id = talker.client.session_id
        recorded = load(truth.recordings / session_id)
        lines = [line for _, line in recorded.lines]
        events = [line for line in lines if line["type"] == "event"]
        journal = [pb.ConverseResponse.FromString(payload) for payload in truth.events(session_id)]
        assert [line["seq"] for line in events] == [event.seq for event in journal]
        assert [line["kind"] for line in events] == [e.WhichOneof("event") for e in journal]
        sizes = [len(e.output_audio_delta.audio) for e in journal if e.output_audio_delta.audio]
        assert [line["audio"]["bytes"] for line in events if "audio" in line] == sizes
        applied = [line for line in lines if line["type"] == "command" and not line.get("skipped")]
        engine_bound = [line for line in applied if line["kind"] != "close_session"]
        assert [line["client_seq"] for line in engine_bound if line["client_seq"]] == [
            seq for seq, _ in truth.engine_input[session_id]
        ]
        assert recorded.end()["reason"] == "ended"
