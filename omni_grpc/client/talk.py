"""``omni-grpc talk``: say a file to the server, print what happens, keep the answer.

The audio goes out in chunks at real-time pace (or as fast as the stream takes it), then the
turn ends with a commit, or with the server's voice activity detection after trailing silence.
Events print compactly as they arrive; each answered turn gets a line with its latency on the
client's clock, measured from the end of input (the commit, or ``speech_stopped`` with VAD):

* TTFT: to the first text or transcript delta;
* TTFP: to the first audio delta;
* RTF: from the end of input to the last audio delta, divided by the audio's duration. Above 1
  the answer took longer to arrive than to play (a server that releases audio at real-time
  pace, as the embedded engine does by default, always gives a little over 1); the line says
  so where it prints one.

With server VAD the run ends once every turn the server detected is answered and the input is
all sent, whichever comes last: a file that ends in a long silence has its answer before the
silence is sent, and the run ends with the input.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TextIO

from omni_grpc.client.client import DuplexClient
from omni_grpc.client.errors import ConnectionLost, DuplexClientError
from omni_grpc.client.wavio import PcmAudio, write_wav
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_OUTPUT_RATE_HZ, pcm16_ms

_QUIET_KINDS = frozenset(
    {"output_audio_delta", "output_audio_transcript_delta", "output_text_delta", "heartbeat_ack"}
)
VAD_TAIL_MS = 1200  # silence after the input, so the detector sees the turn end
RTF_ABOVE_1 = (
    "end of input to last audio over the audio's length: above 1, the answer arrived slower "
    "than it plays, as audio paced in real time does"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TalkSettings:
    """Everything the talk command needs, already checked."""

    target: str
    audio: PcmAudio
    api_key: str | None = field(default=None, repr=False)
    tls: bool = False
    root_certificates: bytes | None = None
    fast: bool = False
    vad: bool = False
    chunk_ms: int = 100
    out_path: str | None = None
    instructions: str | None = None
    voice: str | None = None
    text_only: bool = False
    timeout_s: float = 60.0
    verbose: bool = False


@dataclass(slots=True)
class TurnTiming:
    """One answered turn, timed on the client's clock."""

    end_of_input: float
    first_text: float | None = None
    first_audio: float | None = None
    last_audio: float | None = None
    audio_ms: float = 0.0
    transcript: str = ""

    def summary(self) -> str:
        def ms(at: float | None) -> str:
            return "-" if at is None else f"{(at - self.end_of_input) * 1000:.0f} ms"

        rtf = "-"
        if self.last_audio is not None and self.audio_ms > 0:
            ratio = (self.last_audio - self.end_of_input) / (self.audio_ms / 1000)
            rtf = f"{ratio:.3f}"
            if ratio > 1:
                rtf += f" ({RTF_ABOVE_1})"
        return (
            f"ttft {ms(self.first_text)} | ttfp {ms(self.first_audio)} | rtf {rtf} | "
            f"{self.audio_ms / 1000:.2f} s audio"
        )


class TalkRun:
    """Follows the events of one talk run: prints them, times turns, keeps the reply."""

    def __init__(self, out: TextIO, *, verbose: bool, vad: bool) -> None:
        self.out = out
        self.verbose = verbose
        self.vad = vad
        self.reply = bytearray()
        self.reply_rate_hz = CANONICAL_OUTPUT_RATE_HZ  # until a delta names its rate
        self.turns: list[TurnTiming] = []
        self.pending: TurnTiming | None = None  # the turn whose answer is awaited
        self.active: TurnTiming | None = None
        self.input_done = False
        self.finished = asyncio.Event()
        self.failure: str | None = None

    def end_input(self, at: float) -> None:
        """The client finished sending (and committed, without VAD). With VAD, a run whose
        turns were all answered while the input's last silence was still being sent is over."""
        self.input_done = True
        if not self.vad:
            self.pending = TurnTiming(end_of_input=at)
        elif self.turns and self.pending is None and self.active is None:
            self.finished.set()

    def on_event(self, event: pb.ConverseResponse) -> None:
        now = time.monotonic()
        kind = event.WhichOneof("event") or "unknown"
        if self.verbose or kind not in _QUIET_KINDS:
            self._print(event, kind)
        if kind == "speech_stopped" and self.vad:
            self.pending = TurnTiming(end_of_input=now)
        elif kind == "response_created":
            self.active, self.pending = self.pending or TurnTiming(end_of_input=now), None
        elif kind in ("output_audio_transcript_delta", "output_text_delta"):
            self._text(getattr(event, kind).delta, now)
        elif kind == "output_audio_delta":
            self._audio(event.output_audio_delta, now)
        elif kind in ("response_done", "response_listen"):
            self._turn_over(kind)
        elif kind == "error" and not self.active and self.input_done:
            self.failure = f"{event.error.code}: {event.error.message}"
            self.finished.set()

    def _text(self, delta: str, now: float) -> None:
        if self.active is not None:
            if delta and self.active.first_text is None:
                self.active.first_text = now
            self.active.transcript += delta

    def _audio(self, delta: pb.OutputAudioDelta, now: float) -> None:
        if delta.encoding not in (pb.AUDIO_ENCODING_PCM16, pb.AUDIO_ENCODING_UNSPECIFIED):
            self.failure = "the server sent audio that is not pcm16"
            self.finished.set()
            return
        self.reply += delta.audio
        self.reply_rate_hz = delta.sample_rate_hz or self.reply_rate_hz
        if self.active is not None:
            self.active.first_audio = self.active.first_audio or now
            self.active.last_audio = now
            self.active.audio_ms += delta.duration_ms or pcm16_ms(
                len(delta.audio), self.reply_rate_hz
            )

    def _turn_over(self, kind: str) -> None:
        turn, self.active = self.active, None
        if turn is not None:
            self.turns.append(turn)
            if turn.transcript:
                self.out.write(f"assistant: {turn.transcript}\n")
            self.out.write(f"turn {len(self.turns)}: {turn.summary()}\n")
        if self.input_done and self.pending is None and (kind == "response_done" or not self.vad):
            self.finished.set()

    def _print(self, event: pb.ConverseResponse, kind: str) -> None:
        body = getattr(event, kind, None)
        detail = ""
        if kind == "input_transcription":
            detail = f"you: {event.input_transcription.transcript}"
        elif kind == "error":
            detail = f"{event.error.code}: {event.error.message}"
        elif kind == "response_done":
            response = event.response_done.response
            detail = f"{pb.ResponseStatus.Name(response.status)} {response.status_reason}"
        elif kind == "input_committed":
            detail = f"{event.input_committed.audio_duration_ms:.0f} ms"
        elif kind == "output_audio_delta":
            detail = f"{event.output_audio_delta.duration_ms:.0f} ms"
        elif body is not None and hasattr(body, "delta"):
            detail = repr(body.delta)
        seq = f"{event.seq:>5}" if event.seq else "    -"
        self.out.write(f"{seq} {kind} {detail}".rstrip() + "\n")
        self.out.flush()


def session_config(settings: TalkSettings) -> pb.SessionConfig:
    """The session the talk command asks for."""
    config = pb.SessionConfig(
        input_audio_format=pb.AudioFormat(
            encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=settings.audio.rate_hz
        ),
        output_audio_format=pb.AudioFormat(encoding=pb.AUDIO_ENCODING_PCM16),
        output_modalities=[pb.MODALITY_TEXT if settings.text_only else pb.MODALITY_AUDIO],
        turn_detection=pb.TurnDetection(
            type=pb.TURN_DETECTION_TYPE_SERVER_VAD if settings.vad else pb.TURN_DETECTION_TYPE_NONE
        ),
        input_transcription=pb.InputTranscriptionConfig(enabled=True),
    )
    if settings.instructions is not None:
        config.instructions = settings.instructions
    if settings.voice is not None:
        config.voice = settings.voice
    return config


async def _send_audio(client: DuplexClient, settings: TalkSettings, err: TextIO) -> None:
    chunks = settings.audio.chunks(settings.chunk_ms)
    if settings.vad:
        silence = PcmAudio(
            b"\0\0" * (settings.audio.rate_hz * VAD_TAIL_MS // 1000), settings.audio.rate_hz
        )
        chunks += silence.chunks(settings.chunk_ms)
    total_s = sum(len(c) for c in chunks) / 2 / settings.audio.rate_hz
    started, sent_s, shown = time.monotonic(), 0.0, -1
    for chunk in chunks:
        sent_s += len(chunk) / 2 / settings.audio.rate_hz
        if not settings.fast:
            # Like a microphone: a chunk goes out once its last sample exists, on the audio
            # clock (not after the time sends take, which would drift).
            await asyncio.sleep(max(0.0, started + sent_s - time.monotonic()))
        await client.append_audio(chunk)
        step = int(sent_s / total_s * 4)
        if err.isatty():
            err.write(f"\rsent {sent_s:5.1f} / {total_s:.1f} s")
        elif step != shown:
            err.write(f"sent {sent_s:.1f} / {total_s:.1f} s\n")
        shown = step
    if err.isatty():
        err.write("\n")


def describe(error: DuplexClientError) -> str:
    """One line for a person about why the run failed."""
    if isinstance(error, ConnectionLost):
        return f"{error} (is the server running, and is the address right?)"
    return str(error)


async def talk(settings: TalkSettings, *, out: TextIO, err: TextIO) -> int:
    """Runs one talk session; returns the process exit status."""
    try:
        client = await DuplexClient.connect(
            settings.target,
            api_key=settings.api_key,
            tls=settings.tls,
            root_certificates=settings.root_certificates,
            config=session_config(settings),
        )
    except DuplexClientError as error:
        err.write(f"omni-grpc talk: {describe(error)}\n")
        return 1
    err.write(
        f"session {client.session_id} on {settings.target} ({client.capabilities.engine} engine)\n"
    )
    talk_state = TalkRun(out, verbose=settings.verbose, vad=settings.vad)
    consumer = asyncio.create_task(_consume(client, talk_state))
    status = 0
    try:
        await _send_audio(client, settings, err)
        if not settings.vad:
            await client.commit(create_response=True)
        talk_state.end_input(time.monotonic())
        async with asyncio.timeout(settings.timeout_s):
            await talk_state.finished.wait()
        if consumer.done() and (failure := consumer.exception()) is not None:
            raise failure
        if talk_state.failure:
            err.write(f"omni-grpc talk: {talk_state.failure}\n")
            status = 1
    except DuplexClientError as error:
        err.write(f"omni-grpc talk: {describe(error)}\n")
        status = 1
    except TimeoutError:
        err.write(f"omni-grpc talk: no answer within {settings.timeout_s:g} s\n")
        status = 1
    finally:
        consumer.cancel()
        await client.close()
    if settings.out_path and talk_state.reply:
        write_wav(settings.out_path, bytes(talk_state.reply), talk_state.reply_rate_hz)
        err.write(
            f"reply: {len(talk_state.reply) / 2 / talk_state.reply_rate_hz:.2f} s "
            f"saved to {settings.out_path}\n"
        )
    if client.stats.reconnects:
        err.write(
            f"reconnects: {client.stats.reconnects}, commands resent: "
            f"{client.stats.resent_commands}\n"
        )
    return status


async def _consume(client: DuplexClient, talk_state: TalkRun) -> None:
    try:
        async for event in client.events():
            talk_state.on_event(event)
        talk_state.failure = talk_state.failure or "the session ended before the answer"
    finally:
        talk_state.finished.set()
