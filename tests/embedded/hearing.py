"""Tolerant comparison of what Whisper heard with what was said, for the speech tests.

Whisper tiny.en runs with int8 weights on the CPU, and CTranslate2 picks its kernels by
instruction set, so the same synthetic speech can be written down with small slips on another
machine ("a hundred questions" for "another question", "capital and France"), and a little
more or less silence around a phrase gives the same kind of slips on any one machine. A test
that needs to know that a phrase was heard compares with :func:`heard_as`, never with ``==``.

The measure is the character error rate of the normalized words: the edit distance between
the two texts (lowercase words, one space apart) over the length of what was said. Letters
rather than words, because the slips are mostly one word heard as two, or as its neighbour in
sound: "a hundred questions" for "another question" is three word errors in five, but under a
third of the letters.
"""

from __future__ import annotations

import re

# Measured on our machine with every phrase the speech tests say, each with 72 variations of
# padding (0 to 410 ms before, 300 to 900 ms after), gain (0.3 to 1) and faint noise: the
# worst slip was 0.41 ("and location lights" for "and the kitchen lights"), most were under
# 0.3, and none was heard as another of the phrases. The phrases one test says (the two
# turns, the question and the words over its answer) are at least 0.66 apart, so 0.5 admits
# every slip seen and still tells what was said in one turn from what was said in another.
MAX_ERROR_RATE = 0.5


def words(text: str) -> str:
    """The lowercase words of ``text``, one space apart (case and punctuation are Whisper's
    choice, not the speaker's)."""
    return " ".join(re.findall(r"[a-z']+", text.lower()))


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        diagonal, row[0] = row[0], i
        for j, y in enumerate(b, start=1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (x != y))
    return row[len(b)]


def error_rate(said: str, heard: str) -> float:
    """Edits that turn what was ``said`` into what was ``heard``, per character said."""
    reference = words(said)
    assert reference, "nothing was said to compare with"
    return _edit_distance(reference, words(heard)) / len(reference)


def heard_as(said: str, heard: str) -> bool:
    """Whether ``heard`` is ``said`` with no more slips than Whisper makes across machines."""
    return error_rate(said, heard) <= MAX_ERROR_RATE


__all__ = ["MAX_ERROR_RATE", "error_rate", "heard_as", "words"]
