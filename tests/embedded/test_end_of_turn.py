"""SmolLM2's judgement of a turn's end: the words as it reads them, the calibration, and its
verdicts on whole requests and on requests cut off where a speaker hesitates."""

from __future__ import annotations

import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.engine.embedded.end_of_turn import calibrated, normalized

# Whole requests, and requests cut where a speaker pauses to think, as Whisper writes them at
# a pause (it ends cut ones with a full stop or dots as often as not).
WHOLE = (
    "Turn off the lights in the kitchen.",
    "Remind me to call my mother tomorrow.",
    "Set a timer for 10 minutes.",
    "Tell me a joke.",
    "Play some music.",
    "What is the capital and friends?",
)
CUT = (
    "I want to fly to.",
    "I'd like to book a table for...",
    "Turn off the lights in the.",
    "Book me a flight to",
    "So I was thinking that maybe we could.",
    "My name is.",
    "Can you book a table for?",  # as Whisper may write it: it began like a question
)


def test_the_words_are_read_without_case_or_punctuation_but_a_question_mark() -> None:
    assert normalized("What is the capital of France?") == "what is the capital of france?"
    assert normalized("I'd like to book a table for.") == "i'd like to book a table for"
    assert normalized("  Um...  ") == "um"
    assert normalized("") == ""


def test_the_calibration_centres_between_whole_and_cut_requests() -> None:
    assert calibrated(1e-6) == pytest.approx(0.9, abs=0.02)
    assert calibrated(1e-7) == pytest.approx(0.1, abs=0.03)
    assert calibrated(3e-7) == pytest.approx(0.5)
    assert calibrated(0.0) == 0.0


def test_whole_requests_sound_finished_and_cut_ones_do_not(engine: EmbeddedEngine) -> None:
    assert engine.runtime is not None and engine.runtime.turn_scorer is not None
    scorer = engine.runtime.turn_scorer
    whole = {text: scorer.probability(text) for text in WHOLE}
    cut = {text: scorer.probability(text) for text in CUT}
    assert min(whole.values()) > 0.5, whole
    assert max(cut.values()) < 0.1, cut
