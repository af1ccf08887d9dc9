"""SmolLM2's judgement of a turn's end: the probability of its end-of-turn token after the words.

A chat model has learnt where a user's message ends: SmolLM2-135M-Instruct is likelier to write
``<|im_end|>`` next after "what time is it" than after "I want to fly to" (the approach of
LiveKit's end-of-utterance detector, which fine-tunes this very model; here it is used
zero-shot). The words are scored nearly as LiveKit's detector reads them, lower case without
punctuation, as a bare user message in the model's chat format; only a final question mark is
kept. Whisper's full stops would mislead: it ends most readings of a pause with one, cut
sentences too ("I'd like to book a table for." scores 0.19 as it is, 1e-9 bare), while its
question mark marks a question whole even when its words were misheard ("What is the capital
and friends?": 1e-8 bare, 0.7 with it). Earlier context (a system prompt, the assistant's last
words) moved cut sentences up more than whole ones.

The raw probability is small (after a whole request mostly 1e-6 to 1e-3 without a question
mark, 0.3 to 0.9 with one; after a cut one below 1e-7; docs/engines.md has the requests), so
:func:`calibrated` maps its logarithm to a probability that the turn is over, 0.5 in between.

One forward pass over the words (the prefix is cached), in the model's own scoring cache
(``SmolLM.logprobs_after``), so judging never evicts a conversation being answered.
"""

from __future__ import annotations

import math
import re

from omni_grpc.engine.embedded.models.lm import SmolLM

CONTEXT = "<|im_start|>user\n"
END_OF_TURN = "<|im_end|>"
# The words judged: the end of a long turn is what says whether it is over.
MAX_WORDS_TOKENS = 96
# Words a request is cut at, not ended on: articles, possessives, conjunctions, prepositions.
# Whisper writes a request cut at one with a question mark when it began like a question ("Can
# you book a table for?"), which the model then takes for whole. A question may end on a
# preposition ("Where are you from?"): it then waits as a hesitation would; "about" and "like",
# which questions end on often ("What is the weather like?"), are not here.
CUT_AT = frozenset(
    """
    a an the my your his her our their its some any every and or but because if than to for
    of in on at by with from into onto
    """.split()  # noqa: SIM905
)
# The raw probability at which a turn is as likely over as not, and how steeply the judgement
# turns with its logarithm: 0.9 at 1e-6, 0.1 at 1e-7.
MIDPOINT = 3e-7
SLOPE = 1.9


def normalized(text: str) -> str:
    """``text`` as the judge reads it: lower case, words and apostrophes, and a final
    question mark if it has one."""
    words = " ".join(re.sub(r"[^\w\s']", " ", text.lower()).split())
    return f"{words}?" if words and text.rstrip().endswith("?") else words


def calibrated(raw: float) -> float:
    """The probability that a turn is over, from SmolLM2's raw end-of-turn probability."""
    if raw <= 0.0:
        return 0.0
    return 1.0 / (1.0 + math.exp(-SLOPE * (math.log(raw) - math.log(MIDPOINT))))


class SmolTurnScorer:
    """The kit's :class:`~omni_grpc.engine.kit.end_of_turn.TurnScorer` on SmolLM2."""

    def __init__(self, model: SmolLM) -> None:
        self._model = model
        self._context: list[int] = model.tokenizer.encode(CONTEXT).ids
        end = model.tokenizer.token_to_id(END_OF_TURN)
        if end is None:
            raise ValueError(f"the model's tokenizer has no {END_OF_TURN}")
        self._end = int(end)

    def raw(self, text: str) -> float:
        """SmolLM2's probability of ending the user's message after ``text``, normalized."""
        words: list[int] = self._model.tokenizer.encode(normalized(text)).ids
        if not words:
            return 0.0
        (logprob,) = self._model.logprobs_after(
            self._context + words[-MAX_WORDS_TOKENS:], [[self._end]]
        )
        return math.exp(logprob)

    def probability(self, text: str) -> float:
        """The probability that ``text`` is the whole of the user's turn.

        Two readings are not scored by the model. One that ends on a word no sentence ends on
        (:data:`CUT_AT`) is cut off, whatever its punctuation: 0. One that ends in a question
        mark otherwise is whole: every such reading measured scored 0.3 or more raw
        (calibrated, 1.0), and skipping the model's pass ends a question's turn that much
        sooner on a busy machine.
        """
        words = normalized(text)
        if words.rstrip("?").rsplit(" ", 1)[-1] in CUT_AT:
            return 0.0
        if words.endswith("?"):
            return 1.0
        return calibrated(self.raw(text))
