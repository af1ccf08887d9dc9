"""A WebRTC call's audio, both ways: the caller's Opus track in, the answer's Opus track out.

In: aiortc decodes the caller's Opus packets (PyAV's libopus) into 48 kHz frames;
:func:`hear_caller` resamples them to the session's rate (pcm16 mono) and hands each one on as
an ``append_input_audio`` command, as a websocket client's ``input_audio_buffer.append`` would
be. Media has no backpressure: what the relay has not taken within :data:`MAX_HELD_AUDIO_MS` is
dropped, oldest first, rather than held without bound.

Out: :class:`AnswerTrack` is the track aiortc encodes to Opus. The answer's audio is queued as
it comes from the service (faster than real time), and leaves in 20 ms frames paced on the
track's own media clock (its timestamps, held to the wall clock); between answers the track
sends silence, so the caller's jitter buffer keeps running. What was *sent* on the track is
what the caller heard: each item's sent milliseconds are counted as frames leave, and a clear
(a barge-in, ``response.cancel``, ``output_audio_buffer.clear``) drops what waits at once and
reports how far each cut item had gone. The track tells its :class:`PlaybackListener` when a
response's audio starts leaving and when the last of it has left.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_OUTPUT_RATE_HZ

logger = logging.getLogger(__name__)

FRAME_MS = 20  # one Opus packet: what browsers send and expect
# The rate a call's audio is handed to the session at, and the answer's rate on the track: the
# OpenAI dialect's pcm16 rate, which every session takes without a conversion of its own.
CALL_RATE_HZ = CANONICAL_OUTPUT_RATE_HZ
# Caller audio the relay has not taken yet, at most (then the oldest goes).
MAX_HELD_AUDIO_MS = 5000
# Answer audio queued on the track, at most: a longer answer's tail is dropped (and logged).
MAX_QUEUED_ANSWER_MS = 2 * 60 * 1000  # 5.8 MB of pcm16 at 24 kHz
_BYTES_PER_MS = CALL_RATE_HZ * 2 // 1000


def append_command(pcm: bytes) -> pb.ConverseRequest:
    """The command that hands ``pcm`` (pcm16 mono at :data:`CALL_RATE_HZ`) to the session."""
    return pb.ConverseRequest(
        append_input_audio=pb.AppendInputAudio(
            audio=pcm, encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=CALL_RATE_HZ
        )
    )


async def hear_caller(
    track: MediaStreamTrack, hand_on: Callable[[pb.ConverseRequest], None]
) -> None:
    """Reads the caller's track until it ends, handing each decoded frame on as an append."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=CALL_RATE_HZ)
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        assert isinstance(frame, av.AudioFrame)
        for out in resampler.resample(frame):
            pcm = bytes(out.planes[0])[: out.samples * 2]
            if pcm:
                hand_on(append_command(pcm))


class PlaybackListener(Protocol):
    """What an :class:`AnswerTrack` tells of the audio it sends."""

    def started(self, response_id: str) -> None:
        """The first audio of ``response_id`` left on the track."""

    def stopped(self, response_id: str, item_id: str, sent_ms: float) -> None:
        """The last audio of ``response_id`` (whose audio is complete) left on the track."""


@dataclass(slots=True)
class _Segment:
    """Audio of one item, queued to leave in order."""

    response_id: str
    item_id: str
    pcm: bytearray = field(default_factory=bytearray)


@dataclass(frozen=True, slots=True)
class Cut:
    """An item whose audio a clear stopped: how much of it had left on the track."""

    response_id: str
    item_id: str
    sent_ms: float


class AnswerTrack(MediaStreamTrack):
    """The answer's audio as an outgoing track, paced at 20 ms frames."""

    kind = "audio"

    def __init__(self, listener: PlaybackListener) -> None:
        super().__init__()
        self._listener = listener
        self._queue: deque[_Segment] = deque()
        self._queued_bytes = 0
        self._sent: dict[str, int] = {}  # bytes of each item's audio that left, by item id
        self._playing: set[str] = set()  # responses whose audio started leaving
        self._complete: set[str] = set()  # responses whose audio is all queued
        self._last_item: dict[str, str] = {}  # the item of each playing response's last audio
        self._start: float | None = None  # the wall clock of timestamp 0
        self._timestamp = 0  # in samples, the media clock
        self._samples = CALL_RATE_HZ * FRAME_MS // 1000
        self._time_base = Fraction(1, CALL_RATE_HZ)

    # -- the carrier's side ------------------------------------------------------------

    def queue(self, response_id: str, item_id: str, pcm: bytes) -> None:
        """Queues audio of an item (pcm16 mono at the call's rate) to leave after what waits."""
        if self._queued_bytes + len(pcm) > MAX_QUEUED_ANSWER_MS * _BYTES_PER_MS:
            logger.warning("an answer over %d ms: its tail is dropped", MAX_QUEUED_ANSWER_MS)
            return
        last = self._queue[-1] if self._queue else None
        if last is None or (last.response_id, last.item_id) != (response_id, item_id):
            last = _Segment(response_id, item_id)
            self._queue.append(last)
        last.pcm += pcm
        self._queued_bytes += len(pcm)

    def answer_complete(self, response_id: str) -> None:
        """Every audio of ``response_id`` is queued: its end is told once the last has left."""
        queued = any(s.response_id == response_id for s in self._queue)
        if response_id in self._playing and not queued:
            self._finish(response_id, self._last_item.get(response_id, ""))
        elif queued:
            self._complete.add(response_id)
        # else: none of it is here (cut, or it had no audio): nothing is left to tell

    def clear(self) -> list[Cut]:
        """Drops every queued answer at once; the items cut, and how far each had gone.

        A response whose audio started leaving and is not all out is cut, whether some of it
        waits here or none does for now: an answer made slower than real time leaves the
        queue empty between its chunks, and its next chunk, already on its way, must not play
        after the cut."""
        cuts = [
            Cut(s.response_id, s.item_id, self.sent_ms(s.item_id))
            for s in self._queue
            if s.response_id in self._playing
        ]
        waiting = {cut.response_id for cut in cuts}
        for response_id in sorted(self._playing - waiting):  # between two of its chunks
            item_id = self._last_item.get(response_id, "")
            cuts.append(Cut(response_id, item_id, self.sent_ms(item_id)))
        for segment in self._queue:
            self._forget(segment.response_id, segment.item_id)
        for cut in cuts:
            self._forget(cut.response_id, cut.item_id)
        self._queue.clear()
        self._queued_bytes = 0
        return cuts

    def sent_ms(self, item_id: str) -> float:
        """How much of an item's audio has left on the track, in milliseconds."""
        return self._sent.get(item_id, 0) / _BYTES_PER_MS

    @property
    def busy(self) -> bool:
        """Whether answer audio waits to leave."""
        return bool(self._queue)

    # -- aiortc's side -------------------------------------------------------------------

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        else:
            # Paced on the media clock: frame n leaves at n * 20 ms, whatever the loop did.
            wait_s = self._start + self._timestamp / CALL_RATE_HZ - time.monotonic()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
        frame = av.AudioFrame(format="s16", layout="mono", samples=self._samples)
        frame.planes[0].update(self._take(self._samples * 2))
        frame.pts = self._timestamp
        frame.sample_rate = CALL_RATE_HZ
        frame.time_base = self._time_base
        self._timestamp += self._samples
        return frame

    def _take(self, size: int) -> bytes:
        """The next ``size`` bytes to send: queued answer audio, then silence."""
        out = bytearray()
        while len(out) < size and self._queue:
            segment = self._queue[0]
            if segment.response_id not in self._playing:
                self._playing.add(segment.response_id)
                self._listener.started(segment.response_id)
            self._last_item[segment.response_id] = segment.item_id
            piece = segment.pcm[: size - len(out)]
            del segment.pcm[: len(piece)]
            out += piece
            self._queued_bytes -= len(piece)
            self._sent[segment.item_id] = self._sent.get(segment.item_id, 0) + len(piece)
            if not segment.pcm:
                self._queue.popleft()
                response_id = segment.response_id
                if response_id in self._complete and not any(
                    s.response_id == response_id for s in self._queue
                ):
                    self._finish(response_id, segment.item_id)
        out += bytes(size - len(out))
        return bytes(out)

    def _finish(self, response_id: str, item_id: str) -> None:
        sent_ms = self.sent_ms(item_id)
        self._forget(response_id, item_id)
        self._listener.stopped(response_id, item_id, sent_ms)

    def _forget(self, response_id: str, item_id: str) -> None:
        """A response done with (played out or cut): nothing of it is kept."""
        self._complete.discard(response_id)
        self._playing.discard(response_id)
        self._last_item.pop(response_id, None)
        self._sent.pop(item_id, None)


__all__ = [
    "CALL_RATE_HZ",
    "FRAME_MS",
    "AnswerTrack",
    "Cut",
    "PlaybackListener",
    "append_command",
    "hear_caller",
]
