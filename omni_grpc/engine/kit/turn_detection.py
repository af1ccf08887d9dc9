"""Server-VAD turn detection as pure logic: speech probabilities in, turn boundaries out.

The rules follow OpenAI's ``server_vad`` and Silero's own iterator:

* Speech *starts* when the probability reaches ``threshold`` and stays above the lower
  release threshold (``threshold - 0.15``) for ``min_speech_ms``; the onset reported is the
  start of the first window over ``threshold``, so the report is as early as the audio says,
  while a burst shorter than ``min_speech_ms`` (a cough, a click) never starts a turn.
* Speech *stops* once the probability has stayed under the release threshold for
  ``silence_ms``; the end reported is where that silence began.
* A *pause* is reported once the silence has lasted ``pause_ms`` (96 ms by default, or the
  whole ``silence_ms`` if that is shorter): the turn may be over, so the engine starts
  transcribing it then, and the stop, if it comes, finds the transcript nearly done. (Speech
  over a held reply is paused sooner: the session sets ``pause_ms`` and ``min_speech_ms`` while
  it judges one, see :mod:`.listening_session`.)
* ``prefix_padding_ms`` is not a detection rule: it is how much audio before the onset the
  committed turn keeps (the session's buffer applies it).

Times are milliseconds on the input audio clock: window ``k`` covers ``[32 k, 32 k + 32)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from omni_grpc.engine.kit.vad import WINDOW_MS

# Silero's hysteresis: once speaking, only a probability this far under the threshold counts
# as silence, so the tail of a word does not flicker between speech and silence.
RELEASE_GAP = 0.15


@dataclass(frozen=True, slots=True)
class SpeechStart:
    """Speech began at ``start_ms``; it was confirmed at ``detected_ms``."""

    start_ms: float
    detected_ms: float


@dataclass(frozen=True, slots=True)
class SpeechPause:
    """Speech paused at ``end_ms``; the silence had lasted long enough at ``detected_ms``."""

    end_ms: float
    detected_ms: float


@dataclass(frozen=True, slots=True)
class SpeechStop:
    """Speech ended at ``end_ms``; the silence that confirms it ended at ``detected_ms``."""

    end_ms: float
    detected_ms: float


TurnEvent = SpeechStart | SpeechPause | SpeechStop
# How long a silence inside speech lasts before it is reported as a pause.
PAUSE_MS = 96.0


class TurnDetector:
    """Turns a stream of per-window speech probabilities into start and stop events."""

    def __init__(
        self,
        *,
        threshold: float = 0.5,
        silence_ms: float = 500.0,
        min_speech_ms: float = 64.0,
        pause_ms: float = PAUSE_MS,
        window_ms: float = WINDOW_MS,
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.release = max(threshold - RELEASE_GAP, 0.01)
        self.silence_ms = silence_ms
        self.min_speech_ms = min_speech_ms
        self.pause_ms = pause_ms
        self.window_ms = window_ms
        self.reset()

    def reset(self) -> None:
        """Back to silence, forgetting any half-detected onset or pause."""
        self.speaking = False
        self._candidate_ms: float | None = None  # onset of speech not yet long enough
        self._silence_ms: float | None = None  # start of the pause inside speech
        self._paused = False  # this pause was reported

    @property
    def in_silence(self) -> bool:
        """Whether speech is on hold: a silence inside it has begun and may end the turn."""
        return self._silence_ms is not None

    def push(self, window: int, prob: float) -> TurnEvent | None:
        """Takes the probability of window number ``window``; returns an event, if any."""
        start = window * self.window_ms
        end = start + self.window_ms
        if not self.speaking:
            if self._candidate_ms is None:
                if prob >= self.threshold:
                    self._candidate_ms = start
            elif prob < self.release:
                self._candidate_ms = None
            if self._candidate_ms is not None and end - self._candidate_ms >= self.min_speech_ms:
                onset = self._candidate_ms
                self.speaking, self._candidate_ms, self._silence_ms = True, None, None
                return SpeechStart(start_ms=onset, detected_ms=end)
            return None
        if prob >= self.threshold:
            self._silence_ms, self._paused = None, False
        elif prob < self.release and self._silence_ms is None:
            self._silence_ms = start
        if self._silence_ms is None:
            return None
        if end - self._silence_ms >= self.silence_ms:
            stop = self._silence_ms
            self.speaking, self._silence_ms, self._paused = False, None, False
            return SpeechStop(end_ms=stop, detected_ms=end)
        if not self._paused and end - self._silence_ms >= min(self.pause_ms, self.silence_ms):
            self._paused = True
            return SpeechPause(end_ms=self._silence_ms, detected_ms=end)
        return None
