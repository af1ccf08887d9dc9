"""A session's input side: the uncommitted audio, on one input clock, and server VAD over it.

The input clock counts every millisecond of audio the session was given, from 0 at open, and
every time the session reports (``speech_started.audio_start_ms``, ``speech_stopped``) is on
it. :class:`InputBuffer` keeps the audio not yet committed and knows where it sits on that
clock. :class:`Listener` adds the detector: it scores the audio with Silero, turns scores into
turn boundaries, keeps only ``prefix_padding_ms`` of audio while nobody speaks, and cuts a
turn (prefix padding, speech, and the silence that ended it) when speech stops.

Under semantic turn detection the silence that ends a turn is the eagerness's longest wait:
the session ends the turn sooner (:meth:`Listener.end_turn`) when its judgement of the words
says so (:mod:`.end_of_turn`).
"""

from __future__ import annotations

from dataclasses import dataclass

from omni_grpc.engine.kit.end_of_turn import WAITS
from omni_grpc.engine.kit.turn_detection import (
    RELEASE_GAP,
    SpeechPause,
    SpeechStart,
    SpeechStop,
    TurnDetector,
)
from omni_grpc.engine.kit.vad import WINDOW_MS, SileroVad, VadStream
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, pcm16_bytes, pcm16_ms

BYTES_PER_MS = pcm16_bytes(1, CANONICAL_INPUT_RATE_HZ)  # 32 bytes of canonical input
# While silent, a little more than the prefix padding is kept: an onset is only confirmed
# min_speech_ms after it starts, and its padding reaches back from the onset.
_SLACK_MS = 250.0
# The digital silence a pause's audio is padded with under semantic detection: what a turn
# ended by the usual silence holds after its speech (one judged over ends after less, or more).
_PAD_MS = 500.0


def duration_ms(pcm16: bytes | bytearray) -> float:
    """The length of canonical input audio in milliseconds."""
    return pcm16_ms(len(pcm16), CANONICAL_INPUT_RATE_HZ)


class InputBuffer:
    """Uncommitted canonical input and its place on the input clock."""

    def __init__(self) -> None:
        self.audio = bytearray()
        self.clock_ms = 0.0  # the input clock at the end of everything appended

    @property
    def start_ms(self) -> float:
        """The input clock at the first byte still held."""
        return self.clock_ms - duration_ms(self.audio)

    def append(self, pcm16: bytes) -> None:
        self.audio += pcm16
        self.clock_ms += duration_ms(pcm16)

    def _offset(self, at_ms: float) -> int:
        offset = round((at_ms - self.start_ms) * BYTES_PER_MS)
        offset -= offset % 2
        return min(max(offset, 0), len(self.audio))

    def keep_after(self, at_ms: float) -> None:
        """Forgets the audio before ``at_ms``."""
        del self.audio[: self._offset(at_ms)]

    def peek(self, start_ms: float) -> bytes:
        """A copy of the audio from ``start_ms`` to the end, leaving it held."""
        return bytes(self.audio[self._offset(start_ms) :])

    def take(self, start_ms: float, end_ms: float) -> bytes:
        """Returns the audio in ``[start_ms, end_ms)`` and forgets everything before ``end_ms``."""
        cut = bytes(self.audio[self._offset(start_ms) : self._offset(end_ms)])
        self.keep_after(end_ms)
        return cut

    def take_all(self) -> bytes:
        taken = bytes(self.audio)
        self.audio.clear()
        return taken

    def clear(self) -> None:
        self.audio.clear()


@dataclass(frozen=True, slots=True)
class Pause:
    """Speech paused at ``speech_end_ms``; ``audio`` is the turn so far, to transcribe early."""

    audio: bytes
    speech_end_ms: float


@dataclass(frozen=True, slots=True)
class Turn:
    """A turn that server VAD ended: its audio and where its speech was."""

    audio: bytes
    speech_start_ms: float
    speech_end_ms: float


class Listener:
    """Server VAD for one session; ``scores`` runs the model, ``advance`` applies the rules."""

    def __init__(
        self, vad: SileroVad, detection: pb.TurnDetection, min_speech_ms: float, max_turn_ms: float
    ) -> None:
        self.buffer = InputBuffer()
        self._stream: VadStream = vad.stream()
        self._origin_ms = 0.0  # the input clock at window 0 of the stream
        self._max_turn_ms = max_turn_ms
        self.detector = TurnDetector(min_speech_ms=min_speech_ms)
        self.configure(detection)
        self.speech_start_ms: float | None = None

    def configure(self, detection: pb.TurnDetection) -> None:
        """Takes new thresholds from an update; a turn in progress goes on."""
        self.prefix_ms = float(detection.prefix_padding_ms)
        self.detector.threshold = detection.threshold
        self.detector.release = max(detection.threshold - RELEASE_GAP, 0.01)
        self.detector.silence_ms = float(detection.silence_duration_ms)
        self._pad_ms = self.detector.silence_ms
        if detection.type == pb.TURN_DETECTION_TYPE_SEMANTIC_VAD:
            self.detector.silence_ms = WAITS[detection.eagerness].longest_ms
            self._pad_ms = _PAD_MS

    @property
    def speaking(self) -> bool:
        return self.speech_start_ms is not None

    def scores(self, pcm16: bytes) -> list[float]:
        """Speech probabilities of the windows ``pcm16`` completes; blocking, off the loop."""
        return self._stream.feed(pcm16)

    def advance(self, pcm16: bytes, probs: list[float]) -> list[SpeechStart | Pause | Turn]:
        """Appends the audio and applies its scores; returns starts, pauses and turns."""
        first = self._stream.windows - len(probs)
        self.buffer.append(pcm16)
        events: list[SpeechStart | Pause | Turn] = []
        for index, prob in enumerate(probs):
            event = self.detector.push(first + index, prob)
            if isinstance(event, SpeechStart):
                start = SpeechStart(
                    self._origin_ms + event.start_ms, self._origin_ms + event.detected_ms
                )
                self.speech_start_ms = start.start_ms
                events.append(start)
            elif isinstance(event, SpeechPause) and self.speech_start_ms is not None:
                # Whisper hallucinates on speech cut off short ("..., how are you today? Good
                # morning"); digital silence for the rest of silence_ms makes the guess hear
                # what the committed turn will hold.
                missing_ms = max(0.0, self._pad_ms - (event.detected_ms - event.end_ms))
                audio = self.buffer.peek(self.speech_start_ms - self.prefix_ms) + bytes(
                    round(missing_ms) * BYTES_PER_MS
                )
                events.append(Pause(audio=audio, speech_end_ms=self._origin_ms + event.end_ms))
            elif isinstance(event, SpeechStop):
                events.append(
                    self._cut(self._origin_ms + event.end_ms, self._origin_ms + event.detected_ms)
                )
        if self.speech_start_ms is not None and (
            self.buffer.clock_ms - self.speech_start_ms > self._max_turn_ms
        ):
            # Bounded memory: a turn that never pauses is cut where it stands.
            events.append(self._cut(self.buffer.clock_ms, self.buffer.clock_ms))
            self.detector.reset()
        if self.speech_start_ms is None:
            self.buffer.keep_after(self.buffer.clock_ms - self.prefix_ms - _SLACK_MS)
        return events

    def _cut(self, end_ms: float, detected_ms: float) -> Turn:
        start = self.speech_start_ms if self.speech_start_ms is not None else end_ms
        self.speech_start_ms = None
        audio = self.buffer.take(start - self.prefix_ms, detected_ms)
        return Turn(audio=audio, speech_start_ms=start, speech_end_ms=end_ms)

    def end_turn(self, end_ms: float) -> Turn:
        """Ends the turn whose speech paused at ``end_ms`` now (its silence judged long
        enough): the turn keeps the silence heard so far."""
        turn = self._cut(end_ms, self.buffer.clock_ms)
        self.detector.reset()
        return turn

    def drop_speech(self) -> None:
        """Forgets the speech in progress (judged no turn: a cough over a reply); the model's
        state and the clock go on."""
        self.speech_start_ms = None
        self.detector.reset()
        self.buffer.keep_after(self.buffer.clock_ms - self.prefix_ms - _SLACK_MS)

    def stop_now(self) -> Turn:
        """Ends the turn at the present (a client commit): everything held becomes the turn."""
        start = self.speech_start_ms if self.speech_start_ms is not None else self.buffer.start_ms
        self.speech_start_ms = None
        self.detector.reset()
        return Turn(
            audio=self.buffer.take_all(), speech_start_ms=start, speech_end_ms=self.buffer.clock_ms
        )

    def reset(self) -> None:
        """Drops held audio and detector state (a clear); the input clock goes on."""
        self.buffer.clear()
        self._stream.reset()
        self._origin_ms = self.buffer.clock_ms
        self.detector.reset()
        self.speech_start_ms = None

    def append_unscored(self, pcm16: bytes) -> None:
        """Audio while VAD is off: held until the client commits, and the clock advances."""
        self.buffer.append(pcm16)
        # The model's windows no longer line up with the clock: start it afresh when VAD is
        # turned back on.
        self._stream.reset()
        self._origin_ms = self.buffer.clock_ms
        self.detector.reset()


__all__ = ["WINDOW_MS", "InputBuffer", "Listener", "Pause", "SpeechStart", "Turn", "duration_ms"]
