"""SmolLM2's answers, judged on the question set of scripts/lm_questions.py.

The default prompt and sampling scored 21 of 28 when they were chosen (the settings before
them: 17); greedy decoding makes the score the same on every run of one machine, and the
bound leaves three answers of room for another machine's arithmetic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from omni_grpc.engine.embedded.models.lm import SmolLM, find_smollm2
from omni_grpc.engine.embedded.responder import (
    ACTING_INSTRUCTIONS,
    DECLINE,
    DEFAULT_INSTRUCTIONS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    EXAMPLES,
    MAX_SENTENCES,
    Request,
    SentenceLimit,
    SmolResponder,
)
from tests.scripts import load_script

MIN_CORRECT = 18  # of 28


questions = load_script("lm_questions")


@pytest.fixture(scope="module")
def responder() -> Iterator[SmolResponder]:
    executor = ThreadPoolExecutor(1)
    try:
        yield SmolResponder(SmolLM(find_smollm2()), executor)
    finally:
        executor.shutdown()


def _request(question: str, instructions: str = "") -> Request:
    return Request(
        instructions=instructions,
        turns=[("user", question)],
        max_tokens=DEFAULT_MAX_TOKENS,
        temperature=DEFAULT_TEMPERATURE,
        seed=1,
    )


async def _answer(responder: SmolResponder, question: str) -> str:
    return "".join([piece async for piece in responder.reply(_request(question)).pieces])


def test_the_default_answers_state_the_expected_facts(responder: SmolResponder) -> None:
    assert len(questions.QUESTIONS) >= 20
    result = asyncio.run(questions.score(lambda q: _answer(responder, q)))
    correct = sum(ok for *_, ok in result.answers)
    assert correct >= MIN_CORRECT, result.failed
    for _, answer, _ in result.answers:  # spoken answers: at most MAX_SENTENCES sentences
        assert answer.strip()
        assert SentenceLimit(MAX_SENTENCES).take(answer + " ").strip() == answer.strip()


def test_the_examples_go_only_with_the_default_instructions(responder: SmolResponder) -> None:
    example = EXAMPLES[1][1]
    assert example in responder._model.decode(responder._prompt("", [("user", "Hi.")]))
    plain = responder._prompt(DEFAULT_INSTRUCTIONS, [("user", "Hi.")])
    assert example in responder._model.decode(plain)
    own = responder._prompt("You are a pirate.", [("user", "Hi.")])
    assert example not in responder._model.decode(own)


def test_a_response_that_may_call_functions_is_not_told_it_cannot_act(
    responder: SmolResponder,
) -> None:
    told = responder._model.decode(responder._prompt("", [("user", "Hi.")]))
    assert "cannot control" in told and EXAMPLES[-1][1] in told
    acting = responder._model.decode(responder._prompt("", [("user", "Hi.")], tools=True))
    assert ACTING_INSTRUCTIONS in acting and EXAMPLES[1][1] in acting
    assert "cannot" not in acting and "can't" not in acting


def test_the_sentence_limit_cuts_where_the_next_sentence_starts() -> None:
    limit = SentenceLimit(2)
    pieces = ["It", " is", " 3", ".", "5", " km", ".", " It", " is", " far", "!", " Then", " more."]
    assert "".join(limit.take(p) for p in pieces) == "It is 3.5 km. It is far!"
    assert limit.reached
    one = SentenceLimit(1)
    assert one.take('He said "stop." Then') == 'He said "stop."'
    assert one.take(" more") == ""
    open_ended = SentenceLimit(2)
    assert open_ended.take("No end in sight") == "No end in sight"
    assert not open_ended.reached


def test_a_sentence_that_declines_ends_the_answer() -> None:
    limit = SentenceLimit(MAX_SENTENCES, last=DECLINE)
    pieces = ["Sorry,", " I can't", " call", " from here.", " I'm", " sorry, I can't book."]
    assert "".join(limit.take(p) for p in pieces) == "Sorry, I can't call from here."
    assert limit.reached
    answer = SentenceLimit(MAX_SENTENCES, last=DECLINE)
    text = "Paris is the capital. It is in France. More."
    assert answer.take(text) == "Paris is the capital. It is in France."
    late = SentenceLimit(3, last=DECLINE)
    assert (
        late.take("Boil water. You cannot skip it. Then wait.") == "Boil water. You cannot skip it."
    )
