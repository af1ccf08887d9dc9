"""The default answers to commands, requests, a question and thanks, judged by the rubric of
scripts/answer_rubric.py: none refused, none described as text-based, none repeated back, and
each command or request answered in one sentence.

A few lines of the tuning part of scripts/answer_set.py (scripts/bench_answers.py runs them
all) go to SmolLM2's responder as a session's default request asks: no instructions of its
own, greedy. Under the prompt before the assistant's (a command repeated back, a booking
refused at length) five of these eight lines failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from omni_grpc.engine.embedded.models.lm import SmolLM, find_smollm2
from omni_grpc.engine.embedded.responder import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    Request,
    SentenceLimit,
    SmolResponder,
)
from tests.scripts import load_script

answer_set = load_script("answer_set")  # before the rubric, which imports it by name
rubric = load_script("answer_rubric")

SAID = (
    "Turn on the living room lights.",
    "Switch on the heating.",
    "Lock the front door.",
    "Can you book a table for two at an Italian restaurant tonight?",
    "Book me a taxi to the airport.",
    "Add milk to my shopping list.",
    "What is the opposite of hot?",
    "Thank you so much!",
)


@pytest.fixture(scope="module")
def responder() -> Iterator[SmolResponder]:
    executor = ThreadPoolExecutor(1)
    try:
        yield SmolResponder(SmolLM(find_smollm2()), executor)
    finally:
        executor.shutdown()


async def _answer(responder: SmolResponder, text: str) -> str:
    request = Request(
        instructions="",
        turns=[("user", text)],
        max_tokens=DEFAULT_MAX_TOKENS,
        temperature=DEFAULT_TEMPERATURE,
        seed=1,
    )
    return "".join([piece async for piece in responder.reply(request).pieces]).strip()


def test_no_default_answer_is_refused_or_parroted(responder: SmolResponder) -> None:
    lines = [line for line in answer_set.TUNING if line.text in SAID]
    assert len(lines) == len(SAID)
    judged = [(line, asyncio.run(_answer(responder, line.text))) for line in lines]
    bad = [
        (line.text, answer, verdict)
        for line, answer in judged
        if (verdict := rubric.classify(line, answer)) in ("refused", "parroted")
    ]
    assert not bad
    for line, answer in judged:  # a command or request is answered in one sentence
        if line.expected == "acknowledged":
            assert SentenceLimit(1).take(answer + " ").strip() == answer, answer
