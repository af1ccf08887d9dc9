"""Whisper's best few readings of a turn, re-ranked by the language model.

Whisper base hears espeak-ng's robotic vowels wrong, but its beam often holds the right words a
little further down: on the speech test set, the best of each turn's five beam hypotheses has
about a third fewer errors than the first. What tells them apart is what a person would say,
which SmolLM2 knows better than Whisper's small decoder ("What is the capital and friends?"
against "What is the capital of France?"). So each distinct reading is scored by both, Whisper's
log-probability of the audio's text plus LM_WEIGHT times SmolLM2's of the text as a user's turn,
and the best sum wins (docs/engines.md has the word error rates and the time it adds).

Readings that differ only in case or punctuation are one reading (the likelier by Whisper),
and the tokens every reading starts with are context, not scored: they add the same to each.
What is left goes through SmolLM2 in one forward pass (``SmolLM.logprobs_after``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from omni_grpc.engine.embedded.models.asr import Hypothesis
from omni_grpc.engine.embedded.models.lm import SCORE_CONTEXT, SmolLM

# Chosen on the speech set's even lines and checked on its odd ones (docs/engines.md): from
# 0.3 to 1.0 the rate moved by a word or two in a thousand.
LM_WEIGHT = 0.5
# A reading whose Whisper log-probability per token is this far (nats) below the beam's best
# is no candidate. Summed log-probabilities favour short texts, and a wide beam holds readings
# cut short ("call" for "Call my mother on her mobile."), which the audio makes unlikely token
# by token. Of the speech set's 2240 five-best readings in its espeak-ng voices, 69 were this
# far down, and 1 of them heard better than the beam's first.
MAX_PER_TOKEN_GAP = 0.5
# The beam when the LM re-ranks it: eight readings heard the set better than five (13.4 % of the
# words wrong against 14.5 %, both without the floor) for about 15 ms a turn; ten no better.
RESCORED_BEAM = 8
# A reading is scored as what a user says to the assistant, in SmolLM2's chat format.
CONTEXT = "<|im_start|>user\n"
END_OF_TURN = "<|im_end|>"


def _words(text: str) -> tuple[str, ...]:
    return tuple(re.sub(r"[^\w\s']", " ", text.lower()).split())


class LmRescorer:
    """Picks a turn's reading with SmolLM2; one per engine, called from the model threads."""

    def __init__(self, model: SmolLM, weight: float = LM_WEIGHT) -> None:
        self._model = model
        self.weight = weight
        self._context: list[int] = model.tokenizer.encode(CONTEXT).ids
        end = model.tokenizer.token_to_id(END_OF_TURN)
        if end is None:
            raise ValueError(f"the model's tokenizer has no {END_OF_TURN}")
        self._end = int(end)

    def choose(self, hypotheses: Sequence[Hypothesis]) -> int:
        """The index of the reading to keep: the best sum of Whisper's and the LM's scores."""
        distinct: dict[tuple[str, ...], int] = {}
        floor = max(h.per_token for h in hypotheses) - MAX_PER_TOKEN_GAP
        for index, hypothesis in enumerate(hypotheses):
            if hypothesis.per_token < floor:
                continue
            words = _words(hypothesis.text)
            if words not in distinct or hypothesis.logprob > hypotheses[distinct[words]].logprob:
                distinct[words] = index
        if len(distinct) < 2:
            return next(iter(distinct.values()), 0)
        indices = list(distinct.values())
        texts = [
            [*self._model.tokenizer.encode(hypotheses[i].text).ids, self._end] for i in indices
        ]
        shared = _shared_start(texts)
        context = self._context + texts[0][:shared]
        continuations = [tokens[shared:] for tokens in texts]
        if len(context) + sum(map(len, continuations)) > SCORE_CONTEXT:
            # A long turn (a minute of speech): Whisper's likeliest, rather than a pass that
            # would cost more than the turn can hide.
            return 0
        lm = self._model.logprobs_after(context, continuations)
        return max(
            zip(indices, lm, strict=True),
            key=lambda pair: hypotheses[pair[0]].logprob + self.weight * pair[1],
        )[0]


def _shared_start(texts: list[list[int]]) -> int:
    """How many tokens every text starts with, leaving each at least its last."""
    shortest = min(len(tokens) for tokens in texts)
    shared = 0
    while shared < shortest - 1 and len({tokens[shared] for tokens in texts}) == 1:
        shared += 1
    return shared
