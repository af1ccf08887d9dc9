"""Whisper's beam readings re-ranked by SmolLM2 (omni_grpc.engine.embedded.models.rescoring),
with the real models: the LM's batched scoring against its one-token-at-a-time path, the choice
it makes, and a session that hears the speech set's sample through it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.engine.embedded.models.asr import BEAM_SIZE, Hypothesis, Transcriber
from omni_grpc.engine.embedded.models.lm import SmolLM, _PrefixTree, find_smollm2
from omni_grpc.engine.embedded.models.rescoring import (
    CONTEXT,
    END_OF_TURN,
    MAX_PER_TOKEN_GAP,
    RESCORED_BEAM,
    LmRescorer,
)

from .conftest import speech, word_error_rate
from .test_speech_set import MAX_SAMPLE_WER, hear_sample


@pytest.fixture(scope="module")
def lm() -> SmolLM:
    return SmolLM(find_smollm2())


def as_user_turn(lm: SmolLM, text: str) -> float:
    """SmolLM2's log-probability of ``text`` as a user's whole turn, as the rescorer asks it."""
    context = list(lm.tokenizer.encode(CONTEXT).ids)
    return lm.logprobs_after(context, [list(lm.tokenizer.encode(text + END_OF_TURN).ids)])[0]


class CountingLm:
    """The real model, counting what it is asked to score."""

    def __init__(self, model: SmolLM) -> None:
        self.model = model
        self.tokenizer = model.tokenizer
        self.scored: list[list[list[int]]] = []

    def logprobs_after(self, context: list[int], continuations: list[list[int]]) -> list[float]:
        self.scored.append(continuations)
        return self.model.logprobs_after(context, continuations)


def test_several_continuations_scored_at_once_score_as_one_at_a_time(lm: SmolLM) -> None:
    encode = lm.tokenizer.encode
    context = encode("<|im_start|>user\nWhat is the").ids
    continuations = [
        encode(" capital of France?<|im_end|>").ids,
        encode(" capital and friends?<|im_end|>").ids,
        encode(" time<|im_end|>").ids,
        encode("?").ids,
        [],  # nothing more: certain
        encode(" capital of Spain?<|im_end|>").ids,  # its start shared with France's
        encode(" capital of France?<|im_end|>").ids,  # twice: the same rows
    ]
    together = lm.logprobs_after(context, continuations)
    alone = [lm.continuation_logprob(context, tokens) for tokens in continuations]
    assert together == pytest.approx(alone, abs=1e-3)
    assert together[0] > together[1]  # the model knows what people ask
    # Again, with the context already held: the same figures.
    assert lm.logprobs_after(context, continuations) == pytest.approx(alone, abs=1e-3)


def test_continuations_that_start_alike_share_those_rows() -> None:
    tree = _PrefixTree([[7, 8, 9], [7, 8, 10], [11], [], [7, 8, 9]])
    assert tree.tokens == [7, 8, 9, 10, 11]  # five rows for eleven tokens
    assert tree.depths == [0, 1, 2, 2, 0]
    assert tree.paths == [[0, 1, 2], [0, 1, 3], [4], [], [0, 1, 2]]
    # A row sees itself and its ancestors only: 10 does not see 9, nor 11 anything before it.
    assert tree.sees.astype(int).tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 0, 1, 0],
        [0, 0, 0, 0, 1],
    ]


def test_scoring_leaves_the_conversation_the_model_is_writing_alone(lm: SmolLM) -> None:
    prompt = lm.chat_prompt("Answer in one short sentence.", [("user", "Name a colour.")])

    def answer() -> str:
        pieces = lm.generate(prompt, max_tokens=12, temperature=0.0, seed=0, cancelled=bool)
        return "".join(pieces)

    first = answer()
    lm.logprobs_after(lm.tokenizer.encode("<|im_start|>user\n").ids, [[42, 43, 44]] * 3)
    assert answer() == first


def test_the_lm_picks_what_a_person_would_say_over_a_slightly_likelier_mishearing(
    lm: SmolLM,
) -> None:
    rescorer = LmRescorer(lm)
    heard = [
        Hypothesis("What is the capital and friends?", -3.0, 9),
        Hypothesis("What is the capital of France?", -3.5, 8),
    ]
    assert rescorer.choose(heard) == 1


def test_a_reading_the_audio_makes_far_likelier_keeps_its_place(lm: SmolLM) -> None:
    rescorer = LmRescorer(lm)
    # Far down the beam token by token: no candidate, whatever the LM thinks of it.
    heard = [
        Hypothesis("Call Ngozi at noon.", -2.0, 7),
        Hypothesis("Call nobody at noon.", -40.0, 6),
    ]
    assert rescorer.choose(heard) == 0
    # Close in the beam, the LM's word counts; with no weight on it, the audio's order decides.
    close = [
        Hypothesis("Call nobody at noon.", -2.5, 6),
        Hypothesis("Call Ngozi at noon.", -2.0, 7),
    ]
    assert rescorer.choose(close) == 0
    assert LmRescorer(lm, weight=0.0).choose(close) == 1


def test_a_reading_cut_short_does_not_win_on_its_length(lm: SmolLM) -> None:
    """Heard by Whisper base with a beam of 8 from the Piper voice: summed, the fragment's
    log-probabilities are the highest, but the audio makes it unlikely token by token."""
    rescorer = LmRescorer(lm)
    heard = [
        Hypothesis("Call my mother on her mobile.", -0.85, 9),
        Hypothesis("Call my mother on her", -5.92, 7),
        Hypothesis("call", -6.41, 2),
    ]
    assert rescorer.choose(heard) == 0
    # Without the floor, the fragment would have won: that is what the floor is for.
    assert heard[0].per_token - heard[2].per_token > MAX_PER_TOKEN_GAP
    whole, fragment = (h.logprob + rescorer.weight * as_user_turn(lm, h.text) for h in heard[::2])
    assert fragment > whole


def test_readings_that_differ_in_case_or_punctuation_are_one_and_need_no_lm(
    lm: SmolLM,
) -> None:
    counting = CountingLm(lm)
    rescorer = LmRescorer(counting)  # type: ignore[arg-type]
    heard = [
        Hypothesis("Turn off the lights.", -2.0, 6),
        Hypothesis("Turn off the lights", -2.2, 5),
        Hypothesis("turn off the lights!", -1.9, 6),
    ]
    assert rescorer.choose(heard) == 2  # the likeliest of the one reading
    assert counting.scored == []
    heard.append(Hypothesis("turn off the light!", -2.1, 6))
    rescorer.choose(heard)
    # Two readings scored, each from where they part ("lights" / "light"), not from the start.
    (scored,) = counting.scored
    assert len(scored) == 2
    assert all(len(tokens) <= 4 for tokens in scored), scored


def test_readings_too_long_to_score_in_one_pass_keep_whisper_s_order(lm: SmolLM) -> None:
    counting = CountingLm(lm)
    rescorer = LmRescorer(counting)  # type: ignore[arg-type]
    long = "I said a great many things that day about the weather. " * 12
    # Readings that part at their first word: each is scored whole, four times 150 tokens.
    heard = [Hypothesis("Fine. " + long, -90.0, 150), Hypothesis("Fined. " + long, -80.0, 150)]
    heard += [Hypothesis(word + long, -95.0, 150) for word in ("Find. ", "Fiend. ")]
    assert rescorer.choose(heard) == 0
    assert counting.scored == []


def test_a_transcriber_with_a_rescorer_asks_it_about_every_reading_of_the_beam(
    lm: SmolLM,
) -> None:
    asked: list[list[Hypothesis]] = []

    class Last:
        def choose(self, hypotheses: list[Hypothesis]) -> int:
            asked.append(list(hypotheses))
            return len(hypotheses) - 1

    transcriber = Transcriber(model="tiny.en", reranker=Last())
    said = speech.say("please book a table for two at seven tonight")
    audio = (np.clip(said, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    told: list[tuple[str, int]] = []  # Whisper's likeliest, and how many choices were made
    heard = transcriber.transcribe(
        audio, first_reading=lambda text: told.append((text, len(asked)))
    )
    (readings,) = asked
    assert len(readings) == transcriber.decoding.beam_size
    assert heard == readings[-1].text
    assert len({r.text for r in readings}) == len(readings)
    assert all(r.logprob < 0 for r in readings)  # whole texts' log-probabilities
    # The likeliest reading was told before the reranker chose (here, another).
    assert told == [(readings[0].text, 0)]
    transcriber.reranker = None
    assert transcriber.transcribe(audio, first_reading=told.append) == readings[0].text
    assert len(told) == 1  # nothing to tell ahead without a reranker: the text is the answer


@pytest.fixture(scope="module")
def rescoring_engine() -> Iterator[EmbeddedEngine]:
    """Echo answers, so only hearing is measured; SmolLM2 loaded to re-rank the beam."""
    built = EmbeddedEngine({"responder": "echo", "asr_rescoring": "on"})
    built.load()
    yield built
    asyncio.run(built.stop())


# The sample of tests/embedded/test_speech_set.py, heard through a session with rescoring: 8 of
# its 92 words wrong on our machine (8.7 %), 13 without it. The bound leaves four words for
# another machine's int8 kernels (12 of 92 pass) and fails the engine without rescoring.
MAX_RESCORED_SAMPLE_WER = 0.13


async def test_the_engine_with_rescoring_hears_the_sample_better(
    rescoring_engine: EmbeddedEngine,
) -> None:
    assert rescoring_engine.runtime is not None
    assert isinstance(rescoring_engine.runtime.asr.reranker, LmRescorer)
    assert rescoring_engine.runtime.asr.decoding.beam_size == RESCORED_BEAM
    pairs = await hear_sample(rescoring_engine)
    assert MAX_RESCORED_SAMPLE_WER < MAX_SAMPLE_WER
    assert word_error_rate.total(pairs).rate <= MAX_RESCORED_SAMPLE_WER, pairs


def test_without_the_lm_whisper_s_likeliest_reading_is_the_text(engine: EmbeddedEngine) -> None:
    """The shared engine answers with echo and leaves rescoring at auto: no LM, no rescorer."""
    assert engine.options.asr_rescoring == "auto"
    assert engine.runtime is not None and engine.runtime.asr.reranker is None
    assert engine.runtime.asr.decoding.beam_size == BEAM_SIZE  # a wider beam would not pay
    with pytest.raises(ValueError, match="asr_rescoring"):
        EmbeddedEngine({"asr_rescoring": "maybe"})


def _noises() -> dict[str, np.ndarray]:
    """Sounds with no words in them, as a turn the VAD let through on them would be cut."""
    rng = np.random.default_rng(7)
    sounds = {}
    for seconds in (1.0, 2.0):
        samples = int(16000 * seconds)
        for dbfs in (-40, -30, -20):
            sounds[f"white noise {seconds} s at {dbfs} dBFS"] = rng.normal(
                0.0, 10 ** (dbfs / 20), samples
            )
        sounds[f"clicks {seconds} s"] = 0.5 * (rng.random(samples) > 0.999)
    sounds["hum 1.0 s"] = 0.05 * np.sin(2 * np.pi * 120 * np.arange(16000) / 16000)
    return sounds


def test_the_engine_hears_no_words_in_noise_where_a_fixed_prompt_would(
    rescoring_engine: EmbeddedEngine,
) -> None:
    """Why no fixed prompt goes before the turn (docs/engines.md, "Hearing"): it lowered the
    speech set's error rate a little but made Whisper hear "Thank you." in noise."""
    assert rescoring_engine.runtime is not None
    asr = rescoring_engine.runtime.asr
    pcm = {
        name: (np.clip(sound, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        for name, sound in _noises().items()
    }
    assert {name: asr.transcribe(audio) for name, audio in pcm.items()} == dict.fromkeys(pcm, "")
    # The clips are ones Whisper can be fooled by: with a prompt, words come out of them.
    default = asr.decoding
    asr.decoding = dataclasses.replace(
        default, initial_prompt="Hello. Okay, sure: quick questions, simple chores, small errands."
    )
    try:
        heard = {name: asr.transcribe(audio) for name, audio in pcm.items()}
    finally:
        asr.decoding = default
    assert any(heard.values()), heard
