"""The answer rubric (scripts/answer_rubric.py) on answers written by hand, among them the two
a new user got: a command repeated back and a booking refused "as a text-based AI"."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from answer_rubric import ACK_MAX_WORDS, classify, parrots
from answer_set import HELD_OUT, KINDS, TUNING, Said

LIGHTS = Said("command", "Turn on the living room lights.", (r"\blights?\b",))
TABLE = Said(
    "request",
    "Can you book a table for two at an Italian restaurant tonight?",
    (r"\btables?\b|\bbook|\brestaurant|\breserv",),
)
CAPITAL = Said("question", "What is the capital of Australia?", (r"\bcanberra\b",))
GREETING = Said("small talk", "Good morning!", (r"\b(morning|hello|hi|hey)\b",))


@pytest.mark.parametrize(
    ("line", "answer", "verdict"),
    [
        (LIGHTS, "Turn on the living room lights.", "parroted"),
        (LIGHTS, "Okay, turning on the living room lights now.", "parroted"),
        (
            LIGHTS,
            "Sorry, I can't switch your lights from here; try the wall switch.",
            "acknowledged",
        ),
        (LIGHTS, "Got it, but I have no way to reach your lights.", "acknowledged"),
        (LIGHTS, "I can\u2019t do that.", "refused"),
        (LIGHTS, "The living room is a nice place to relax.", "missed"),
        (
            TABLE,
            "I'm sorry, but as a text-based AI, I'm unable to book a table for you.",
            "refused",
        ),
        (TABLE, "I am just a language model, so you can book the table yourself.", "refused"),
        (TABLE, "I can't book tables, but the restaurant's phone line can.", "acknowledged"),
        (TABLE, "I'm unable to help with that.", "refused"),
        (CAPITAL, "The capital of Australia is Canberra.", "answered"),
        (CAPITAL, "Sydney is the largest city of Australia.", "missed"),
        (CAPITAL, "The capital of Australia is Sydney.", "parroted"),  # one word added
        (CAPITAL, "What is the capital of Australia?", "parroted"),
        (CAPITAL, "I cannot answer that.", "refused"),
        (GREETING, "Good morning!", "answered"),
        (GREETING, "Good morning! How can I help?", "answered"),
        (
            Said("command", "Start the dishwasher.", (r"\bdishwasher",)),
            "Start the dishwasher.",
            "parroted",
        ),
    ],
)
def test_the_rubric_classes_answers_written_by_hand(line: Said, answer: str, verdict: str) -> None:
    assert classify(line, answer) == verdict


def test_an_acknowledgement_must_be_short() -> None:
    short = "Sorry, I can't switch on your lights from here."
    long = short + " But" + " really" * ACK_MAX_WORDS + " sorry."
    assert classify(LIGHTS, short) == "acknowledged"
    assert classify(LIGHTS, long) == "refused"  # it says it cannot, at length


def test_a_command_answered_with_a_foreign_example_is_missed() -> None:
    timer = Said("command", "Set a timer for ten minutes.", (r"\btimers?\b",))
    answer = "Set a timer for ten minutes and keep it in a paper bag or a bread box."
    assert not parrots(timer.text, answer)
    assert classify(timer, answer) == "missed"


def test_the_set_has_every_kind_in_both_parts_and_no_line_twice() -> None:
    for part in (TUNING, HELD_OUT):
        assert {line.kind for line in part} == set(KINDS)
    texts = [line.text for line in TUNING + HELD_OUT]
    assert len(texts) == len(set(texts)) and len(texts) >= 40
    assert {line.expected for line in TUNING} == {"answered", "acknowledged"}


def test_no_question_holds_the_words_of_its_own_answer() -> None:
    # The rubric takes a question's patterns as new words: repeating it cannot answer it.
    for line in TUNING + HELD_OUT:
        if line.expected == "answered" and len(line.text.split()) >= 4:
            assert classify(line, line.text) == "parroted", line.text
