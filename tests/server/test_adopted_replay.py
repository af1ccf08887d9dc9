"""An adopted session's host replays into its fresh engine what its lost owner stored and had
not applied (``DurableTap.take_replay`` in server/taps.py, into ``SessionHost.replay``): each
kind of command whose number a round stores before the engine applied it, and the uncommitted
input, under server VAD without telling a ``speech_started`` twice.

The engines here are stand-ins with the seam's shape (a detector is a model: the embedded
engine's tier): one says ``speech_started`` at the first append whose audio is not silence and
reports each command applied, as a durable server asks engines to; one never applies anything
(its replica dies first).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from omni_grpc.core import Session
from omni_grpc.core.commands import AppendAudio, CancelResponse, EngineCommand, kind_of
from omni_grpc.engine.base import EngineSession
from omni_grpc.server.durable import DurableStore
from omni_grpc.server.host import SessionHost
from omni_grpc.server.taps import DurableTap
from omni_grpc.wire import pb
from tests.cluster.local import wait_for
from tests.core.helpers import VAD_ENGINE, append, open_session
from tests.server.test_durable import GRACE_S, _store, redis_url  # noqa: F401 - the fixture

VAD = pb.SessionConfig(
    input_audio_format=pb.AudioFormat(encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=16000),
    turn_detection=pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SERVER_VAD),
)
SILENCE, SPEECH = b"\0\0" * 8, b"\1\0" * 8


class Detector(EngineSession):
    """Hears appends; speech_started at the first one that is not silence."""

    def __init__(self) -> None:
        self.heard: list[EngineCommand] = []
        self._events: asyncio.Queue[pb.ConverseResponse] = asyncio.Queue()
        self._speaking = False

    async def submit(self, command: EngineCommand) -> None:
        self.heard.append(command)
        speech = type(command) is AppendAudio and command.audio.strip(b"\0")
        if speech and not self._speaking:
            self._speaking = True
            await self._events.put(pb.ConverseResponse(speech_started=pb.SpeechStarted()))
        if self.report_applied:
            await self._events.put(pb.ConverseResponse(applied_client_seq=command.client_seq))

    def stop_speaking(self) -> None:
        self._speaking = False

    async def events(self) -> AsyncIterator[pb.ConverseResponse]:
        while True:
            yield await self._events.get()

    async def close(self) -> None:
        pass


def _durable_host(
    session: Session, engine: EngineSession, store: DurableStore, now: float
) -> tuple[SessionHost, DurableTap]:
    """A host with its durability tap, as the server makes it (sessions.py)."""
    host = SessionHost(session, engine, lambda _: None, lambda: now)
    durable = DurableTap(store, host)
    host.taps.add(durable)
    return host, durable


async def _replay(
    host: SessionHost,
    durable: DurableTap,
    appends: list[bytes],
    commands: list[bytes],
    *,
    response_cut: bool = False,
) -> None:
    """What an adoption does with the stored lists (Sessions._adopt)."""
    await host.replay(durable.take_replay(host, appends, commands, response_cut=response_cut))


async def _replayed(told_before: bool, redis_url: str) -> tuple[SessionHost, Detector]:  # noqa: F811
    """An adopted session whose journal did (or did not) tell the turn's speech_started."""
    store = DurableStore(redis_url, "r2", "async", record_ttl_s=60.0, grace_s=GRACE_S)
    session = open_session(engine=VAD_ENGINE, config=VAD).session
    session.admission.applied_client_seq = 3  # as stored: it covers the three appends
    if told_before:
        session.publish(pb.ConverseResponse(speech_started=pb.SpeechStarted()), 1.0)
    engine = Detector()
    host, durable = _durable_host(session, engine, store, 2.0)
    stored = [  # as the owner stores them: their format resolved
        append(
            seq, audio, encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=16000
        ).SerializeToString()
        for seq, audio in enumerate((SILENCE, SPEECH, SPEECH), 1)
    ]
    await _replay(host, durable, stored, [])
    await wait_for(lambda: durable.replay.last_applied == 3, 10, "the replay")
    return host, engine


def _speech_events(host: SessionHost) -> int:
    journal = host.session.journal
    told = [
        pb.ConverseResponse.FromString(p) for _, p in journal.entries_after(journal.dropped_through)
    ]
    return sum(1 for event in told if event.HasField("speech_started"))


async def test_a_turn_told_before_the_adoption_is_not_told_again(redis_url: str) -> None:  # noqa: F811
    host, engine = await _replayed(True, redis_url)
    assert [r.client_seq for r in engine.heard] == [1, 2, 3]  # all of it, in order
    assert _speech_events(host) == 1  # the one told before the adoption
    engine.stop_speaking()  # the turn ends; the next one is new, and told
    await host.receive(host.session.generation, append(4, SPEECH))
    await wait_for(lambda: _speech_events(host) == 2, 10, "the next turn's speech_started")
    await host.abandon()


async def test_a_turn_the_client_was_not_told_of_is_told_once(redis_url: str) -> None:  # noqa: F811
    host, _ = await _replayed(False, redis_url)
    assert _speech_events(host) == 1
    await host.abandon()


async def test_a_cancel_of_the_response_the_adoption_cut_is_not_replayed(
    redis_url: str,  # noqa: F811
) -> None:
    store = DurableStore(redis_url, "r2", "async", record_ttl_s=60.0, grace_s=GRACE_S)
    session = open_session(engine=VAD_ENGINE, config=VAD).session
    engine = Detector()
    host, durable = _durable_host(session, engine, store, 2.0)
    cancel = pb.ConverseRequest(client_seq=1, cancel_response=pb.CancelResponse())
    await _replay(host, durable, [], [cancel.SerializeToString()], response_cut=True)
    await _replay(host, durable, [], [cancel.SerializeToString()], response_cut=False)
    # Once: only where no cut had ended the response.
    assert engine.heard == [CancelResponse(client_seq=1)]
    await host.abandon()


class Stalled(Detector):
    """An engine that takes commands and has applied none of them when its replica dies."""

    async def submit(self, command: EngineCommand) -> None:
        self.heard.append(command)

    def submit_now(self, command: EngineCommand) -> list[pb.ConverseResponse] | None:
        return None  # everything through the mailbox, which is never worked


USER_ITEM = pb.ConversationItem(
    type=pb.ITEM_TYPE_MESSAGE,
    role=pb.ITEM_ROLE_USER,
    content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text="hello")],
)
COMMANDS = {  # each command whose number a round stores before the engine applied it
    "create_conversation_item": pb.CreateConversationItem(item=USER_ITEM),
    "create_response": pb.CreateResponse(),
    "update_session": pb.UpdateSession(config=pb.SessionConfig(instructions="Be brief.")),
    "truncate_conversation_item": pb.TruncateConversationItem(item_id="item_1", audio_end_ms=10),
    "append_input_text": pb.AppendInputText(text="typed"),
}


@pytest.mark.parametrize("kind", list(COMMANDS))
async def test_a_command_stored_before_its_effect_is_replayed_once(
    kind: str,
    redis_url: str,  # noqa: F811
) -> None:
    owner, adopter = await _store(redis_url, "r1"), await _store(redis_url, "r2")
    try:
        session = open_session().session
        lost, _ = _durable_host(session, Stalled(), owner, 1.0)
        request = pb.ConverseRequest(client_seq=1, **{kind: COMMANDS[kind]})
        await lost.receive(1, request)
        await wait_for(lambda: _stored_applied(adopter, session.id, 1), 10, "the round")
        stored = await adopter.load(session.id)
        assert stored is not None and len(stored.commands) == 1
        fresh = Detector()
        host, durable = _durable_host(session, fresh, adopter, 2.0)
        await _replay(host, durable, stored.appends, stored.commands)
        assert [kind_of(command) for command in fresh.heard] == [kind]
        await host.abandon()
        await lost.abandon()
    finally:
        await owner.stop()
        await adopter.stop()


async def _stored_applied(store: DurableStore, session_id: str, seq: int) -> bool:
    stored = await store.load(session_id)
    return stored is not None and stored.state.applied_client_seq >= seq
