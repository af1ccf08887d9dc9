"""Semantic end of turn: at a pause, how long to wait for more speech, from what was heard.

A fixed silence (server VAD's 500 ms) answers a speaker who pauses inside a sentence ("I want
to fly to ... Boston") half way through, and makes every finished question wait as long. So at
each pause an engine judges the turn so far, with up to two judges: an ear (a
:class:`SoundScorer`: how likely the sound of the speech, its pitch and pace at the end, is a
finished turn) and a reader (a :class:`TurnScorer`: how likely the words so far are a whole
turn). Their :class:`Judgement` is one probability, a weighted mean of the two
(:func:`combined`): each judge moves it only by its weight, so one judge fooled (a word
misheard, a phrase spoken with a final fall) cannot alone take a turn from "finished" to
"unfinished", there is no cliff. The turn ends after a wait that follows that probability:
short when the turn sounds finished, long when it does not, never past the eagerness's longest
wait (OpenAI's semantic_vad: about 8, 4 and 2 s for low, medium and high).

Everything here is pure and runs on the input audio clock (milliseconds of audio the session
was given), the clock turn detection already counts silence on: :class:`TurnEndTimer` is told
of pauses, judgements and speech, and says when the turn is due to end; the session that owns
it feeds it the clock. Tests drive it with plain numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from omni_grpc.wire import pb


class TurnScorer(Protocol):
    """Judges whether words end a user's turn; blocking, run off the event loop."""

    def probability(self, text: str) -> float:
        """The probability, in [0, 1], that ``text`` is all the user meant to say."""


class SoundScorer(Protocol):
    """Judges whether the sound of speech ends a user's turn; blocking, off the event loop."""

    def probability(self, pcm16: bytes) -> float:
        """The probability, in [0, 1], that the speaker of ``pcm16`` (canonical 16 kHz PCM16,
        the turn up to its pause) has finished."""


# The ear's share of the judgement where both judges judged; the reader has the rest. Measured
# on the turn-taking set (scripts/bench_judges.py, docs/measurements/2026-12-07-two-judges.md).
SOUND_WEIGHT = 0.5


def combined(sound: float | None, words: float | None) -> float | None:
    """One probability from the two judges' (None: that judge did not judge)."""
    if sound is None:
        return words
    if words is None:
        return sound
    return SOUND_WEIGHT * sound + (1.0 - SOUND_WEIGHT) * words


# While the words are still being read, the reader's verdict is taken to be "unfinished": the
# ear alone moves the probability, by its weight at most, so a turn that sounds finished ends
# only after a wait of the middle of the scale (at auto about 900 ms, against 350 ms with an
# even prior, which on a loaded machine answered two more hesitations of the set, the words
# coming too late to hold them: docs/measurements/2026-12-07-two-judges.md), and one that does
# not waits longer; the words, when they come, settle it.
UNREAD = 0.0


@dataclass(frozen=True, slots=True)
class Judgement:
    """What the judges made of a pause: the ear's probability and the reader's (None where
    that judge did not judge; ``reading``: the reader has yet to), and the one the wait
    follows."""

    sound: float | None = None
    words: float | None = None
    reading: bool = False

    @property
    def probability(self) -> float | None:
        if self.reading and self.words is None:
            return combined(self.sound, UNREAD)
        return combined(self.sound, self.words)


@dataclass(frozen=True, slots=True)
class Waits:
    """An eagerness's waits in ms of silence: for words that sound finished, for words that
    could not be judged in time (the fixed silence that stood in before), and the longest."""

    finished_ms: float
    unjudged_ms: float
    longest_ms: float


# The longest waits are OpenAI's; the unjudged ones the silences that stood in for semantic
# detection before (omni_grpc.core.turn_taking); the shortest leave room for a breath.
WAITS: dict[pb.Eagerness.ValueType, Waits] = {
    pb.EAGERNESS_LOW: Waits(400.0, 1000.0, 8000.0),
    pb.EAGERNESS_MEDIUM: Waits(200.0, 500.0, 4000.0),
    pb.EAGERNESS_AUTO: Waits(200.0, 500.0, 4000.0),
    pb.EAGERNESS_HIGH: Waits(100.0, 300.0, 2000.0),
}
# Where the wait is shortest and where longest, on the scorer's probability (a scorer maps its
# model's raw score to a probability the turn is over: SmolLM2's in .embedded.end_of_turn).
# In between, the wait falls geometrically from the longest to the shortest.
FINISHED_P = 0.9
UNFINISHED_P = 0.1


def wait_ms(probability: float | None, waits: Waits) -> float:
    """How long to wait after a pause whose words end the turn with ``probability`` (None:
    not judged)."""
    if probability is None:
        return waits.unjudged_ms
    if probability >= FINISHED_P:
        return waits.finished_ms
    if probability <= UNFINISHED_P:
        return waits.longest_ms
    share = (probability - UNFINISHED_P) / (FINISHED_P - UNFINISHED_P)
    return math.exp((1 - share) * math.log(waits.longest_ms) + share * math.log(waits.finished_ms))


@dataclass(frozen=True, slots=True)
class TurnEndDecision:
    """One judgement: the pause it was made at, the judges' verdicts, and the wait chosen."""

    pause_ms: float  # where the speech paused, on the input clock
    judgement: Judgement
    wait_ms: float
    decided_ms: float  # how long after the pause the judgement came

    @property
    def probability(self) -> float | None:
        return self.judgement.probability

    def event(
        self, item_id: str, eagerness: pb.Eagerness.ValueType, transcript: str
    ) -> pb.ConverseResponse:
        """The ``turn_end_decision`` event that reports it."""
        body = pb.TurnEndDecision(
            item_id=item_id,
            audio_end_ms=self.pause_ms,
            probability=-1.0 if self.probability is None else self.probability,
            wait_ms=round(self.wait_ms),
            eagerness=eagerness,
            transcript=transcript,
            decided_ms=self.decided_ms,
            sound_probability=self.judgement.sound,
            words_probability=self.judgement.words,
        )
        return pb.ConverseResponse(turn_end_decision=body)


class TurnEndTimer:
    """When a turn under semantic detection ends, on the input clock.

    A pause starts the wait at its longest; a judgement of that pause shortens it (or not); speech
    cancels it. A judgement of an earlier pause (the user spoke on since) changes nothing.
    """

    def __init__(self, eagerness: pb.Eagerness.ValueType) -> None:
        self.waits = WAITS[eagerness]
        self.pause_ms: float | None = None
        self.due_ms: float | None = None

    def paused(self, pause_ms: float) -> None:
        """Speech paused at ``pause_ms``: until judged, the turn ends at the longest wait."""
        self.pause_ms = pause_ms
        self.due_ms = pause_ms + self.waits.longest_ms

    def judged(
        self, pause_ms: float, judgement: Judgement, now_ms: float
    ) -> TurnEndDecision | None:
        """Takes the judgement of the pause at ``pause_ms``, made at ``now_ms``; returns the
        decision, or None if that pause is no longer the one waited on."""
        if self.pause_ms is None or pause_ms != self.pause_ms:
            return None
        wait = wait_ms(judgement.probability, self.waits)
        self.due_ms = pause_ms + wait
        return TurnEndDecision(pause_ms, judgement, wait, now_ms - pause_ms)

    def spoke(self) -> None:
        """Speech went on: no turn ends until the next pause."""
        self.pause_ms = self.due_ms = None

    def due(self, now_ms: float) -> bool:
        """Whether the turn ends at ``now_ms``."""
        return self.due_ms is not None and now_ms >= self.due_ms
