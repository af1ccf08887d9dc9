"""Word error rate with Whisper's English normalization, for the speech test set.

The normalizer is the one OpenAI wrote for Whisper's own evaluations (``whisper-normalizer``
packages it): case, punctuation, contractions, British spellings, and numbers written as
digits or words counted the same ("two" and "2", "seventy-two degrees" and "72 degrees").
Three gaps of it are closed here. Two are about times, which the set says often: it reads
"6:45" (and the British "6.45") as "6 45" but "six forty-five" as "645", and "p.m." as "p m" but
"pm" as one word. The third: it keeps the symbols a number may hold (".", "$", "%"), and leaves
the last dot of an ellipsis ("rainy...") as a word of its own, which is no word. The alignment
is jiwer's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import jiwer  # type: ignore[import-untyped]
from whisper_normalizer.english import EnglishTextNormalizer  # type: ignore[import-untyped]

_normalizer = EnglishTextNormalizer()
# A clock time; a decimal with two places reads the same, but the set says none.
_CLOCK = re.compile(r"\b(\d{1,2})[:.]([0-5]\d)\b")
_MERIDIEM = re.compile(r"\b([ap]) m\b")
_SPOKEN = re.compile(r"\w")  # a word has a letter or a digit


def normalize(text: str) -> str:
    """``text`` as Whisper's evaluations compare it, times written one way, and no word
    that is only a symbol."""
    words = _MERIDIEM.sub(r"\1m", _normalizer(_CLOCK.sub(r"\1\2", text))).split()
    return " ".join(word for word in words if _SPOKEN.search(word))


@dataclass(frozen=True, slots=True)
class Score:
    """Word errors (substitutions, deletions, insertions) against the words said."""

    errors: int
    words: int

    @property
    def rate(self) -> float:
        return self.errors / self.words if self.words else 0.0

    def __add__(self, other: Score) -> Score:
        return Score(self.errors + other.errors, self.words + other.words)


def score(said: str, heard: str) -> Score:
    """The word errors in ``heard`` against ``said``, both normalized."""
    reference = normalize(said)
    if not reference:
        raise ValueError(f"nothing to compare with in {said!r}")
    hypothesis = normalize(heard)
    if not hypothesis:
        return Score(errors=len(reference.split()), words=len(reference.split()))
    out = jiwer.process_words(reference, hypothesis)
    return Score(
        errors=out.substitutions + out.deletions + out.insertions,
        words=out.hits + out.substitutions + out.deletions,
    )


def total(pairs: list[tuple[str, str]]) -> Score:
    """The score of many (said, heard) pairs: errors over words, pooled."""
    result = Score(0, 0)
    for said, heard in pairs:
        result += score(said, heard)
    return result


__all__ = ["Score", "normalize", "score", "total"]
