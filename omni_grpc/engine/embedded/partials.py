"""Words of a turn while it is spoken, as append-only deltas (``input_transcription_delta``).

Each partial hypothesis is Whisper's greedy guess at the audio so far, and a later one may
revise words an earlier one heard ("Turn off my" becomes "Turn off the lights"). The contract's
deltas, like OpenAI's, are append-only, so only the words two hypotheses in a row agree on are
sent: the common word prefix of the last two, past what was already sent. A word sent is never
taken back; if a later hypothesis disagrees with it, nothing more is sent until the turn ends,
and the final transcript (``input_transcription``) is the truth, which a client shows instead
of the deltas.
"""

from __future__ import annotations


def _common_prefix(a: list[str], b: list[str]) -> list[str]:
    same = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        same += 1
    return a[:same]


class StableWords:
    """The words one turn's hypotheses agree on, and what of them was sent."""

    def __init__(self) -> None:
        self._last: list[str] = []
        self._sent: list[str] = []

    @property
    def sent(self) -> str:
        """All the deltas so far, joined."""
        return " ".join(self._sent)

    def delta(self, hypothesis: str) -> str:
        """Takes the newest hypothesis; returns the text to append (empty when none)."""
        words = hypothesis.split()
        stable = _common_prefix(self._last, words)
        self._last = words
        if stable[: len(self._sent)] != self._sent or len(stable) <= len(self._sent):
            return ""  # nothing new, or it revises what was sent: the final transcript will
        new = stable[len(self._sent) :]
        text = " ".join(new)
        if self._sent:
            text = " " + text
        self._sent = stable
        return text
