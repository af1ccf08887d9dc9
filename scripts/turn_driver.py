"""Plays one dialogue of the turn-taking set (scripts/turn_set.py) against a service, as a client
would, and records when everything happened on the client's clock.

The user's side is streamed in real time, 20 ms at a time, from the session's start, so the
service's input clock is the scene's clock; each chunk's send time is kept, so a moment of the
scene ("the last speech sample") has a time on the client's clock. The client plays the
assistant's audio as a listener would (:class:`Player`): from its first chunk, in real time;
it stops at an overlap decision that pauses or cuts the reply (acking what it played, and
dropping what it held beyond), and goes on at a resume from the point the service names, which
must be where it stopped (else audio was repeated or lost).

The transport is a seam: :class:`Transport` opens a session with a :class:`Setting`, sends
audio, acks playback and yields what it receives as :class:`Heard` events. :class:`GrpcTransport`
is the project's Python client over gRPC; ``turn_bridge.BridgeTransport`` is the ``openai``
SDK's realtime client over the websocket bridge (GA events, plus the duplex extensions where a
setting needs them).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

import make_test_speech as speech
from turn_set import Dialogue

from omni_grpc.client import DuplexClient
from omni_grpc.wire import pb

CHUNK_MS = 20
BYTES_PER_MS = 32  # pcm16 at 16 kHz
REPLY_WAIT_S = 15.0  # the longest the user waits for the reply before speaking over it
END_WAIT_S = 12.0  # the longest the user stays silent waiting for what the dialogue measures


@dataclass(frozen=True, slots=True)
class Setting:
    """A row of the benchmark: how turns end, and when speech over a reply ends it."""

    name: str
    turn_detection: pb.TurnDetection
    interruption: pb.InterruptionConfig = field(default_factory=pb.InterruptionConfig)


@dataclass(frozen=True, slots=True)
class Heard:
    """One event as the client received it, at ``at`` (its perf_counter)."""

    at: float
    kind: str  # speech_stopped, audio, response_done, overlap, turn_end, transcript, error, other
    response_id: str = ""
    start_ms: float = 0.0  # audio: on the response's media clock
    duration_ms: float = 0.0
    cancelled: bool = False  # response_done
    action: str = ""  # overlap: pause, resume, barge_in, drop, listen
    audio_ms: float = 0.0  # overlap: where the reply stopped or goes on
    audio_end_ms: float = 0.0  # speech_stopped, turn_end: on the input clock
    probability: float = 0.0  # turn_end: the judgement, and the wait it chose
    wait_ms: float = 0.0
    decided_ms: float = 0.0  # turn_end: how long after the pause the judgement came
    sound: float | None = None  # turn_end: each judge's own verdict (None: it did not judge)
    words: float | None = None
    text: str = ""  # transcript: the user's turn as the service heard it; error: its message


class Transport(Protocol):
    """A client of the service, whatever it speaks."""

    async def open(self, setting: Setting) -> None: ...
    async def send(self, pcm16: bytes) -> None: ...  # mono 16 kHz
    async def ack(self, response_id: str, played_ms: float) -> None: ...
    def events(self) -> AsyncIterator[Heard]: ...
    async def close(self) -> None: ...


_ACTIONS = {
    pb.OVERLAP_ACTION_PAUSE: "pause",
    pb.OVERLAP_ACTION_RESUME: "resume",
    pb.OVERLAP_ACTION_BARGE_IN: "barge_in",
    pb.OVERLAP_ACTION_DROP: "drop",
    pb.OVERLAP_ACTION_LISTEN: "listen",
}


def heard(event: pb.ConverseResponse, at: float) -> Heard:
    """A contract event as :class:`Heard`."""
    kind = event.WhichOneof("event")
    if kind == "output_audio_delta":
        d = event.output_audio_delta
        return Heard(at, "audio", d.response_id, d.start_ms, d.duration_ms)
    if kind == "response_done":
        r = event.response_done.response
        return Heard(at, kind, r.id, cancelled=r.status == pb.RESPONSE_STATUS_CANCELLED)
    if kind == "overlap_decision":
        o = event.overlap_decision
        return Heard(
            at, "overlap", o.response_id, action=_ACTIONS.get(o.action, ""), audio_ms=o.audio_ms
        )
    if kind == "speech_stopped":
        return Heard(at, kind, audio_end_ms=event.speech_stopped.audio_end_ms)
    if kind == "turn_end_decision":
        t = event.turn_end_decision
        return Heard(
            at,
            "turn_end",
            audio_end_ms=t.audio_end_ms,
            probability=t.probability,
            wait_ms=t.wait_ms,
            decided_ms=t.decided_ms,
            sound=t.sound_probability if t.HasField("sound_probability") else None,
            words=t.words_probability if t.HasField("words_probability") else None,
        )
    if kind == "input_transcription":
        return Heard(at, "transcript", text=event.input_transcription.transcript)
    if kind == "error":
        return Heard(at, "error", text=event.error.message)
    return Heard(at, "other")


class GrpcTransport:
    """The service over gRPC, through the project's Python client."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._client: DuplexClient | None = None

    async def open(self, setting: Setting) -> None:
        config = pb.SessionConfig(
            input_audio_format=pb.AudioFormat(
                encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=16000
            ),
            turn_detection=setting.turn_detection,
            interruption=setting.interruption,
        )
        self._client = await DuplexClient.connect(self._target, config=config)

    async def send(self, pcm16: bytes) -> None:
        assert self._client is not None
        await self._client.append_audio(pcm16)

    async def ack(self, response_id: str, played_ms: float) -> None:
        assert self._client is not None
        await self._client.ack_playback(played_ms, response_id=response_id)

    async def events(self) -> AsyncIterator[Heard]:
        assert self._client is not None
        async for event in self._client.events():
            yield heard(event, time.perf_counter())

    async def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()


class Player:
    """The client's playback of one response at a time, on the client's clock."""

    def __init__(self) -> None:
        self.response_id = ""
        self.position_ms = 0.0  # played so far, on the response's media clock
        self.received_ms = 0.0  # held up to here
        self.playing = False
        self._since = 0.0
        self.resume_errors_ms: list[float] = []  # + audio lost, - audio heard twice

    def _advance(self, now: float) -> None:
        if self.playing:
            elapsed_ms = (now - self._since) * 1000
            self.position_ms = min(self.received_ms, self.position_ms + elapsed_ms)
        self._since = now

    def audio(self, event: Heard) -> None:
        if event.response_id != self.response_id:  # a new reply starts playing
            self.response_id, self.position_ms, self.received_ms = event.response_id, 0.0, 0.0
            self.playing, self._since = True, event.at
        self._advance(event.at)
        self.received_ms = max(self.received_ms, event.start_ms + event.duration_ms)

    def stop(self, now: float) -> float:
        """Stops, drops what it held beyond what it played; returns that point."""
        self._advance(now)
        self.playing, self.received_ms = False, self.position_ms
        return self.position_ms

    def resume(self, now: float, audio_ms: float) -> None:
        self._advance(now)
        self.resume_errors_ms.append(audio_ms - self.position_ms)
        self.position_ms = self.received_ms = audio_ms
        self.playing, self._since = True, now


@dataclass
class Record:
    """What one dialogue gave: every event, and the client's moments of the user's side."""

    dialogue: Dialogue
    setting: str
    events: list[Heard] = field(default_factory=list)
    speech_end: float = 0.0  # the last speech sample of ``before`` was sent
    over_onset: float = 0.0  # the first speech sample of ``over`` was sent
    over_end: float = 0.0  # its last
    resume_errors_ms: list[float] = field(default_factory=list)
    failure: str = ""


class _Clock:
    """Releases 20 ms chunks at real time from the session's start; keeps their send times."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.sent_ms = 0.0
        self.sent_at: list[float] = []  # chunk k's send time

    async def tick(self) -> None:
        due = self.start + (self.sent_ms + CHUNK_MS) / 1000
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        self.sent_ms += CHUNK_MS
        self.sent_at.append(time.perf_counter())

    def at(self, scene_ms: float) -> float:
        """When the chunk holding the input clock's ``scene_ms`` was sent."""
        return self.sent_at[min(int(scene_ms // CHUNK_MS), len(self.sent_at) - 1)]


async def play(dialogue: Dialogue, setting: Setting, transport: Transport) -> Record:
    """Plays ``dialogue`` under ``setting`` and returns its record."""
    record, player = Record(dialogue, setting.name), Player()
    await transport.open(setting)
    reader = asyncio.create_task(_listen(transport, record, player))
    clock = _Clock()
    try:
        await _say(transport, clock, dialogue.before)
        record.speech_end = clock.at(dialogue.before.segments[-1][1])
        if dialogue.over is None:
            await _silence_until(transport, clock, lambda: _measured(record), END_WAIT_S)
        else:
            await _silence_until(
                transport, clock, lambda: _reply_sounded(record, dialogue), REPLY_WAIT_S
            )
            offset = clock.sent_ms
            await _say(transport, clock, dialogue.over)
            start, end, _ = dialogue.over.segments[0]
            record.over_onset, record.over_end = clock.at(offset + start), clock.at(offset + end)
            await _silence_until(transport, clock, lambda: _reply_over(record), END_WAIT_S)
        await asyncio.sleep(0.3)  # what is still on its way
    except Exception as error:  # a dialogue that fails is scored as failed, the run goes on
        record.failure = repr(error)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
        await transport.close()
    record.resume_errors_ms = player.resume_errors_ms
    return record


async def _say(transport: Transport, clock: _Clock, scene: speech.Scene) -> None:
    pcm, size = scene.pcm16(), CHUNK_MS * BYTES_PER_MS
    for start in range(0, len(pcm), size):
        await clock.tick()
        await transport.send(pcm[start : start + size])


async def _silence_until(
    transport: Transport, clock: _Clock, done: Callable[[], bool], limit_s: float
) -> None:
    chunk, until = bytes(CHUNK_MS * BYTES_PER_MS), time.perf_counter() + limit_s
    while not done() and time.perf_counter() < until:
        await clock.tick()
        await transport.send(chunk)


async def _listen(transport: Transport, record: Record, player: Player) -> None:
    async for event in transport.events():
        record.events.append(event)
        if event.kind == "audio":
            player.audio(event)
        elif event.kind == "overlap" and event.response_id == player.response_id:
            if event.action == "pause":
                await transport.ack(event.response_id, player.stop(event.at))
            elif event.action == "barge_in":
                player.stop(event.at)
            elif event.action == "resume":
                player.resume(event.at, event.audio_ms)
        elif event.kind == "response_done" and event.cancelled:
            player.stop(event.at)


def _measured(record: Record) -> bool:
    """A lone turn is measured once its answer sounds (or a hesitation was answered)."""
    return any(e.kind == "audio" and e.at > record.speech_end for e in record.events)


def _reply_sounded(record: Record, dialogue: Dialogue) -> bool:
    first = next((e for e in record.events if e.kind == "audio"), None)
    return first is not None and time.perf_counter() - first.at >= dialogue.over_after_ms / 1000


def _reply_over(record: Record) -> bool:
    reply = next((e.response_id for e in record.events if e.kind == "audio"), "")
    return any(e.kind == "response_done" and e.response_id == reply for e in record.events)
