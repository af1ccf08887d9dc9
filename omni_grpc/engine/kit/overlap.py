"""Speech over a reply: is it an interruption, or a backchannel, a filler, a cough?

OpenAI's rule, and the default, is that any speech over a reply ends it: a cough, "yeah" or
"right" cuts the assistant off. The session's interruption settings (``InterruptionConfig``)
ask for more: that the speech last ``min_duration_ms``, or that it say ``min_words`` words
besides backchannels and fillers (:data:`BACKCHANNELS`). :class:`OverlapJudge` applies them to
one overlap, from its onset, as the session tells it what it hears: speech going on, a pause,
the words so far. Its verdict is an interruption (the reply ends) or not (the speech is
dropped, and a paused reply resumes).

Pure, on the input audio clock like the rest of turn detection: the session passes ``now_ms``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from omni_grpc.wire import pb

# What a listener says to show they are listening, and what a speaker says while thinking, as
# Whisper writes them; none of it asks for the floor. "No", "wait" and "stop" do, so they are
# not here, nor "mm-mm" and "uh-uh" (no). Runs of a letter are shortened to two before the
# lookup ("mmm", "hmmm").
BACKCHANNELS = frozenset(
    # One string: a list a person reads and extends, not sixty lines of literals.
    """
    mm mhm mmhm mm-hm mm-hmm hm hmm uh-huh uhhuh yeah yes yep yup ya yeh ok okay right sure
    alright cool nice great good wow oh ah aha ahh ohh huh really true exactly indeed totally
    gotcha thanks um umm uh uhh er erm ahem ha haha heh cough coughs coughing laughs laughing
    sigh
    """.split()  # noqa: SIM905
)
# Two-word backchannels, removed before the single words are counted.
BACKCHANNEL_PHRASES = (
    ("i", "see"),
    ("got", "it"),
    ("all", "right"),
    ("thank", "you"),
    ("of", "course"),
    ("makes", "sense"),
    ("mm", "hmm"),
    ("uh", "huh"),
)
# A silence this long (ms of input) after the speech lets a verdict of "no interruption"
# fall: shorter, and the breath inside "No, ... wait" would resume the reply for a moment.
SETTLE_MS = 160.0


def _normalized_words(text: str) -> list[str]:
    # Whisper marks sounds in brackets or asterisks: "(coughs)", "[laughter]", "*sigh*".
    text = re.sub(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*", " ", text.lower())
    text = re.sub(r"([a-z])\1{2,}", r"\1\1", text)
    return re.findall(r"[a-z0-9']+(?:-[a-z0-9']+)*", text)


def content_words(text: str) -> list[str]:
    """The words of ``text`` that are not backchannels or fillers."""
    words = _normalized_words(text)
    kept: list[str] = []
    index = 0
    while index < len(words):
        if tuple(words[index : index + 2]) in BACKCHANNEL_PHRASES:
            index += 2
            continue
        if words[index] not in BACKCHANNELS:
            kept.append(words[index])
        index += 1
    return kept


@dataclass(frozen=True, slots=True)
class Rules:
    """A session's interruption settings, read once at an overlap's onset."""

    barge_in: bool  # overlap_policy barge_in_on_speech and interrupt_response
    by_words: bool
    min_duration_ms: float
    min_words: int
    resume: bool
    timeout_ms: float

    @classmethod
    def of(cls, config: pb.SessionConfig) -> Rules:
        rules = config.interruption
        return cls(
            barge_in=config.overlap_policy == pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH
            and config.turn_detection.interrupt_response,
            by_words=rules.mode == pb.INTERRUPTION_MODE_WORDS,
            min_duration_ms=float(rules.min_duration_ms),
            min_words=rules.min_words or 1,
            resume=rules.resume_false_interruption,
            timeout_ms=float(rules.false_interruption_timeout_ms or 2000),
        )

    @property
    def at_onset(self) -> bool:
        """Whether any speech ends the reply the moment it starts (OpenAI's behaviour)."""
        return self.barge_in and not (self.by_words or self.min_duration_ms or self.resume)


class Verdict(enum.Enum):
    MEANT = "meant"  # an interruption: the reply ends
    FALSE = "false"  # no interruption: the speech is dropped


@dataclass(frozen=True, slots=True)
class Judgement:
    """A verdict, why (a reason of ``OverlapDecision``), and what it was judged on."""

    verdict: Verdict
    reason: str
    overlap_ms: float
    transcript: str


class OverlapJudge:
    """Judges one overlap from its onset; see the module docstring."""

    def __init__(self, rules: Rules, onset_ms: float) -> None:
        self.rules = rules
        self.onset_ms = onset_ms
        self._last_speech_ms = onset_ms
        self._silent_since: float | None = None
        self._words = ""
        self._whole = False  # the words cover the speech up to its pause
        self.judgement: Judgement | None = None

    @property
    def overlap_ms(self) -> float:
        return self._last_speech_ms - self.onset_ms

    def speaking(self, now_ms: float) -> Judgement | None:
        """Speech goes on at ``now_ms``."""
        self._last_speech_ms = max(self._last_speech_ms, now_ms)
        self._silent_since = None
        self._whole = False
        return self._judge(now_ms)

    def paused(self, at_ms: float, now_ms: float) -> Judgement | None:
        """The speech paused at ``at_ms`` (a silence began there)."""
        self._last_speech_ms = max(self._last_speech_ms, at_ms)
        self._silent_since = at_ms
        return self._judge(now_ms)

    def heard(self, words: str, now_ms: float, *, upto_ms: float | None = None) -> Judgement | None:
        """The words of the speech so far; ``upto_ms``: the pause they were heard up to (they
        are the whole of it while that pause lasts), None for words of speech going on."""
        self._words = words
        self._whole = upto_ms is not None and upto_ms == self._silent_since
        return self._judge(now_ms)

    def tick(self, now_ms: float) -> Judgement | None:
        """Time passed (input audio came): a pause may have lasted long enough."""
        return self._judge(now_ms)

    def _judge(self, now_ms: float) -> Judgement | None:
        if self.judgement is None:
            found = self._meant() or self._false(now_ms)
            if found is not None:
                self.judgement = Judgement(found[0], found[1], self.overlap_ms, self._words)
        return self.judgement

    def _meant(self) -> tuple[Verdict, str] | None:
        rules = self.rules
        if self.overlap_ms < rules.min_duration_ms:
            return None
        if not rules.by_words:
            return Verdict.MEANT, "min_duration"
        if len(content_words(self._words)) >= rules.min_words:
            return Verdict.MEANT, "min_words"
        return None

    def _false(self, now_ms: float) -> tuple[Verdict, str] | None:
        if self._silent_since is None:
            return None
        silent_ms = now_ms - self._silent_since
        if silent_ms >= self.rules.timeout_ms:
            return Verdict.FALSE, "false_interruption_timeout"
        if silent_ms < SETTLE_MS:
            return None
        if self.overlap_ms < self.rules.min_duration_ms:
            return Verdict.FALSE, "too_short"
        if not self._whole:
            return None  # the words up to the pause are still being written down
        if not _normalized_words(self._words):
            return Verdict.FALSE, "no_words"
        if not content_words(self._words):
            return Verdict.FALSE, "backchannel"
        return Verdict.FALSE, "too_few_words"
