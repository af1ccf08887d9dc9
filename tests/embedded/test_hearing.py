"""The tolerant transcript comparison the speech tests use: it admits the slips Whisper makes
on other machines and still refuses a different phrase, silence, or a hallucinated one."""

from __future__ import annotations

import pytest

from .hearing import error_rate, heard_as, words


def test_case_and_punctuation_are_not_words() -> None:
    assert words("You said: What is the capital of France?") == (
        "you said what is the capital of france"
    )
    assert error_rate("turn off the radio, please", "Turn off the radio, please.") == 0.0


@pytest.mark.parametrize(
    ("said", "heard"),
    [
        # Each was heard on some machine, or with a slightly different padding of the speech.
        ("wait, I have another question", "Wait, I have a hundred questions."),
        ("wait, I have another question", "Wait, I have questions."),
        ("what is the capital of france", "What is the capital and France?"),
        ("and the kitchen lights", "and location lights"),
    ],
)
def test_the_slips_whisper_makes_are_heard_as_what_was_said(said: str, heard: str) -> None:
    assert heard_as(said, heard), error_rate(said, heard)


@pytest.mark.parametrize(
    ("said", "heard"),
    [
        ("wait, I have another question", "What is the capital of France?"),
        ("what is the capital of france", "and the kitchen lights"),
        ("please turn on the kitchen lights", "Turn off the radio, please."),
        ("turn off the radio, please", "Please turn on the kitchen lights."),
        ("what is the capital of france", "Thank you."),
        ("what is the capital of france", ""),
    ],
)
def test_another_phrase_or_nothing_is_not(said: str, heard: str) -> None:
    assert not heard_as(said, heard), error_rate(said, heard)
