"""The turn-taking driver's transport over the websocket bridge (scripts/turn_driver.py): the
official ``openai`` SDK's realtime client, as a stock OpenAI client speaks to the bridge.

A setting becomes GA's ``session.update``: a fixed silence is ``server_vad`` with its
``silence_duration_ms``, semantic turn detection ``semantic_vad`` with its ``eagerness``. A
setting that judges interruptions needs the duplex extensions (``?extensions=1`` on the URL):
``session.interruption`` sets it, and the reply's pause and resume come as ``overlap.decision``
events, with ``turn_end.decision`` for each judgement of the end of a turn. A setting without one
is what a stock client gets, and the socket asks for nothing more: a cut reply is then GA's
``response.done`` ``cancelled``. Events are timed on arrival, as :class:`GrpcTransport` times
them.

GA's audio is pcm16 at 24 kHz both ways, so the set's 16 kHz speech is raised to 24 kHz on the
way out (:class:`Upsampler`) and the answer's deltas are timed from their bytes where the
extensions' ``start_ms`` and ``duration_ms`` are not sent.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import orjson
from openai import AsyncOpenAI
from turn_driver import Heard, Setting
from websockets.exceptions import ConnectionClosed

from omni_grpc.wire import pb

GA_RATE_HZ = 24000
GA_BYTES_PER_MS = 48  # pcm16 at 24 kHz
GA_FORMAT = {"type": "audio/pcm", "rate": GA_RATE_HZ}
# A benchmark model name: the service serves its own engine whatever the URL names.
MODEL = "gpt-realtime"
OPEN_WAIT_S = 30.0

_EAGERNESS = {
    pb.EAGERNESS_LOW: "low",
    pb.EAGERNESS_MEDIUM: "medium",
    pb.EAGERNESS_HIGH: "high",
    pb.EAGERNESS_AUTO: "auto",
}
_MODES = {pb.INTERRUPTION_MODE_SPEECH: "speech", pb.INTERRUPTION_MODE_WORDS: "words"}


def needs_extensions(setting: Setting) -> bool:
    """Whether the setting says anything GA cannot: interruptions judged, not OpenAI's."""
    return setting.interruption != pb.InterruptionConfig()


def turn_detection(td: pb.TurnDetection) -> dict[str, Any]:
    """The contract's turn detection as GA's ``turn_detection``."""
    if td.type == pb.TURN_DETECTION_TYPE_SEMANTIC_VAD:
        return {"type": "semantic_vad", "eagerness": _EAGERNESS[td.eagerness]}
    if td.type == pb.TURN_DETECTION_TYPE_SERVER_VAD:
        vad: dict[str, Any] = {"type": "server_vad"}
        if td.silence_duration_ms:
            vad["silence_duration_ms"] = td.silence_duration_ms
        return vad
    raise ValueError(f"no GA turn detection for {pb.TurnDetectionType.Name(td.type)}")


def interruption(rules: pb.InterruptionConfig) -> dict[str, Any]:
    """The contract's interruption rules as the extension's ``session.interruption``."""
    out: dict[str, Any] = {}
    if rules.mode:
        out["mode"] = _MODES[rules.mode]
    for name in ("min_duration_ms", "min_words", "resume_false_interruption"):
        if rules.HasField(name):
            out[name] = getattr(rules, name)
    if rules.false_interruption_timeout_ms:
        out["false_interruption_timeout_ms"] = rules.false_interruption_timeout_ms
    return out


def session_patch(setting: Setting) -> dict[str, Any]:
    """The ``session`` of the ``session.update`` that applies ``setting``."""
    session: dict[str, Any] = {
        "type": "realtime",
        "audio": {
            "input": {
                "format": GA_FORMAT,
                "turn_detection": turn_detection(setting.turn_detection),
            },
            "output": {"format": GA_FORMAT},
        },
    }
    if needs_extensions(setting):
        session["interruption"] = interruption(setting.interruption)
    return session


class Upsampler:
    """16 kHz pcm16 to 24 kHz, chunk by chunk, by linear interpolation between the samples.

    Not the service's soxr stream resampler: that holds back about 21 ms of output until more
    input comes, which would count against the bridge in every timing from the last speech
    sample. This one waits for nothing (each output sample lies at or before the newest input
    sample); its softer filter is no matter to speech, and the service filters the 24 kHz
    input back down to its own rate anyway.
    """

    def __init__(self) -> None:
        self._last = 0.0  # the previous chunk's last sample
        self._inputs = 0  # input samples so far
        self._outputs = 0  # output samples so far; output k lies at input position k * 2 / 3

    def __call__(self, pcm16: bytes) -> bytes:
        chunk = np.frombuffer(pcm16, np.int16).astype(np.float64)
        if not chunk.size:
            return b""
        end = self._inputs + chunk.size
        last_output = (end - 1) * 3 // 2  # the last one at or before the newest input
        positions = np.arange(self._outputs, last_output + 1) * (2 / 3)
        known = np.arange(self._inputs - 1, end)  # with the previous chunk's last sample
        out = np.interp(positions, known, np.concatenate(([self._last], chunk)))
        self._last, self._inputs, self._outputs = float(chunk[-1]), end, last_output + 1
        return np.round(out).astype(np.int16).tobytes()


class ResponseClock:
    """Where each reply's audio deltas lie on its media clock when the socket is not told: in
    GA a delta is its audio alone, one after another from the start of the reply."""

    def __init__(self) -> None:
        self._played_ms: dict[str, float] = {}

    def place(self, event: dict[str, Any]) -> tuple[float, float]:
        """The delta's start and duration (ms), the extensions' figures where sent."""
        if "start_ms" in event and "duration_ms" in event:
            return float(event["start_ms"]), float(event["duration_ms"])
        duration_ms = len(binascii.a2b_base64(event["delta"])) / GA_BYTES_PER_MS
        start_ms = self._played_ms.get(event["response_id"], 0.0)
        self._played_ms[event["response_id"]] = start_ms + duration_ms
        return start_ms, duration_ms


def heard(event: dict[str, Any], at: float, clock: ResponseClock) -> Heard:
    """A GA (or extension) server event as :class:`Heard`."""
    kind = event.get("type", "")
    if kind == "response.output_audio.delta":
        start_ms, duration_ms = clock.place(event)
        return Heard(at, "audio", event["response_id"], start_ms, duration_ms)
    if kind == "response.done":
        response = event["response"]
        return Heard(
            at, "response_done", response["id"], cancelled=response["status"] == "cancelled"
        )
    if kind == "overlap.decision":
        return Heard(
            at,
            "overlap",
            event["response_id"],
            action=event["action"],
            audio_ms=float(event.get("audio_ms") or 0.0),
        )
    if kind == "input_audio_buffer.speech_stopped":
        return Heard(at, "speech_stopped", audio_end_ms=float(event["audio_end_ms"]))
    if kind == "turn_end.decision":
        return Heard(
            at,
            "turn_end",
            audio_end_ms=float(event.get("audio_end_ms") or 0.0),
            probability=float(event.get("probability") or 0.0),  # null: none judged in time
            wait_ms=float(event["wait_ms"]),
            decided_ms=float(event.get("decided_ms") or 0.0),
            sound=event.get("sound_probability"),
            words=event.get("words_probability"),
        )
    if kind == "conversation.item.input_audio_transcription.completed":
        return Heard(at, "transcript", text=event["transcript"])
    if kind == "error":
        return Heard(at, "error", text=event["error"].get("message", ""))
    return Heard(at, "other")


class BridgeTransport:
    """The service through its websocket bridge, with the ``openai`` SDK's realtime client."""

    def __init__(self, address: str) -> None:
        self._client = AsyncOpenAI(api_key="bench", websocket_base_url=f"ws://{address}/v1")
        self._manager: Any = None
        self._connection: Any = None
        self._upsample = Upsampler()
        self._clock = ResponseClock()
        self.extensions = False

    async def open(self, setting: Setting) -> None:
        self.extensions = needs_extensions(setting)
        # No reconnecting: a dropped socket is a failed dialogue, not one resumed mid-scene.
        self._manager = self._client.realtime.connect(
            model=MODEL,
            extra_query={"extensions": "1"} if self.extensions else {},
            max_retries=0,
        )
        self._connection = await self._manager.__aenter__()
        await self._until("session.created")
        await self._connection.session.update(session=session_patch(setting))
        await self._until("session.updated")

    async def _until(self, kind: str) -> dict[str, Any]:
        until = time.monotonic() + OPEN_WAIT_S
        while True:
            wait_s = max(0.0, until - time.monotonic())
            raw = await asyncio.wait_for(self._connection.recv_bytes(), wait_s)
            event: dict[str, Any] = orjson.loads(raw)
            if event["type"] == "error":
                raise RuntimeError(f"the bridge refused the session: {event['error']}")
            if event["type"] == kind:
                return event

    async def send(self, pcm16: bytes) -> None:
        audio = base64.b64encode(self._upsample(pcm16)).decode("ascii")
        await self._connection.input_audio_buffer.append(audio=audio)

    async def ack(self, response_id: str, played_ms: float) -> None:
        # Only an extension socket is asked to (an overlap decision pauses its reply).
        ack = {"type": "playback.ack", "response_id": response_id, "played_ms": played_ms}
        await self._connection.send(ack)

    async def events(self) -> AsyncIterator[Heard]:
        while True:
            try:
                raw = await self._connection.recv_bytes()
            except ConnectionClosed:
                return
            yield heard(orjson.loads(raw), time.perf_counter(), self._clock)

    async def close(self) -> None:
        if self._manager is None:
            return
        with contextlib.suppress(Exception):
            # GA has no close: a stock client just hangs up, and the bridge then keeps the
            # session resumable for a while. Closing it for good keeps the dialogues that
            # follow from sharing the machine with the last one's leftovers, as over gRPC.
            await self._connection.send({"type": "session.close"})
        with contextlib.suppress(Exception):
            await self._manager.__aexit__(None, None, None)
