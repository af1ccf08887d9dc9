"""The speech test set and its word error rate: what the set holds, how clips are made, and
that the scorer counts what a listener would count as an error, and nothing else."""

from __future__ import annotations

import re

import numpy as np
import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.wire import pb
from tests.scripts import load_script

from .conftest import speech, speech_set, word_error_rate
from .driver import open_driver


def test_the_set_has_at_least_60_distinct_requests_and_several_voices() -> None:
    texts = speech_set.utterances()
    assert len(texts) >= 60
    assert len(set(texts)) == len(texts)
    names = [voice.name for voice in speech_set.voices()]
    assert len(names) >= 5 and len(set(names)) == len(names)
    assert any(voice.snr_db is not None for voice in speech_set.ESPEAK_VOICES)


def test_a_clip_is_laid_out_as_the_engine_cuts_a_turn() -> None:
    voice = speech_set.ESPEAK_VOICES[0]
    (clip,) = speech_set.clips(voice, [0])
    assert clip.text == speech_set.utterances()[0]
    start_ms, end_ms = speech.speech_edges_ms(clip.signal)
    assert start_ms == pytest.approx(speech_set.BEFORE_MS, abs=1)
    assert clip.signal.size / 16 - end_ms == pytest.approx(speech_set.AFTER_MS, abs=1)
    assert len(clip.pcm16()) == 2 * clip.signal.size


def test_noise_is_seeded_and_at_the_voice_s_ratio() -> None:
    noisy = next(v for v in speech_set.ESPEAK_VOICES if v.snr_db is not None)
    quiet = speech_set.Voice("clean", noisy.speak)
    first, again = (speech_set.clip(noisy, 3, "set a timer") for _ in range(2))
    clean = speech_set.clip(quiet, 3, "set a timer")
    np.testing.assert_array_equal(first.signal, again.signal)
    added = first.signal - clean.signal
    loud = clean.signal[np.abs(clean.signal) > 0.02]
    snr_db = 10 * np.log10(np.mean(loud**2) / np.mean(added**2))
    assert snr_db == pytest.approx(noisy.snr_db, abs=0.5)


@pytest.mark.parametrize(
    ("said", "heard"),
    [
        ("Please book a table for two at seven tonight.", "please book a table for 2 at 7 tonight"),
        ("Set the thermostat to seventy-two degrees.", "Set the thermostat to 72 degrees."),
        ("Wake me up at six forty-five tomorrow.", "Wake me up at 6:45 tomorrow."),
        ("Wake me up at six forty-five tomorrow.", "Wake me up at 6.45 tomorrow."),
        ("Convert one hundred dollars to euros.", "Convert $100 to euros."),
        ("Dim the lights to fifty percent.", "Dim the lights to 50%."),
        ("What is the capital of France?", "What's the capital of France"),
        ("Start at nine thirty p.m.", "Start at 9:30 PM."),
        ("The colour of the sky", "The color of the sky"),
        ("The weather today is cold and rainy.", "The weather today is cold and rainy..."),
    ],
)
def test_case_punctuation_numbers_and_spelling_are_not_errors(said: str, heard: str) -> None:
    assert word_error_rate.score(said, heard).errors == 0, (
        word_error_rate.normalize(said),
        word_error_rate.normalize(heard),
    )


@pytest.mark.parametrize(
    ("said", "heard", "errors"),
    [
        # Heard by Whisper tiny.en in the set: substitutions, a deletion, insertions.
        (
            "Please book a table for two at seven tonight.",
            "Please work a table for 2 at 7 to hide.",
            3,
        ),
        ("Call my mother on her mobile.", "Call my mother under mobile", 2),
        ("Turn off the lights in the kitchen.", "Turn off my life, Simba Kitchen", 4),
        ("Order more coffee filters.", "Order more coffee filters. Order more", 2),
        ("What is the capital of France?", "", 6),
    ],
)
def test_errors_are_counted_word_by_word(said: str, heard: str, errors: int) -> None:
    result = word_error_rate.score(said, heard)
    assert result.errors == errors
    assert result.words == len(word_error_rate.normalize(said).split())


def test_the_fixed_prompts_tried_hold_no_word_of_the_set() -> None:
    """A prompt built from the set's own words would be fitted to it, not generic."""
    bench_hearing = load_script("bench_hearing")
    said = {
        word for text in speech_set.utterances() for word in re.findall(r"[a-z']+", text.lower())
    }
    for prompt in bench_hearing.PROMPTS.values():
        assert not said & set(re.findall(r"[a-z']+", prompt.lower())), prompt


def test_the_rate_pools_words_across_utterances() -> None:
    pooled = word_error_rate.total(
        [("Pause the music.", "Pause the music."), ("Open the garage door.", "Open the door.")]
    )
    assert (pooled.errors, pooled.words) == (1, 7)
    assert pooled.rate == pytest.approx(1 / 7)


# A sample of the set for the suite: every fifth request, the espeak-ng voices taken in turn,
# so each says two or three (scripts/bench_hearing.py runs the whole set in every voice).
SAMPLE = range(0, 64, 5)
# The engine's default (Whisper base, a beam of 5, each turn levelled) got 13 of this sample's
# 92 words wrong on our machine (14.1 %; 14 before levelling; the whole set's figures are in
# docs/engines.md), tiny.en 25 (27.2 %). The bound leaves six words for another machine's int8
# kernels (19 of 92 pass, 20 fail), and still fails tiny.en.
MAX_SAMPLE_WER = 0.21


def sample_clips() -> list[speech_set.Clip]:
    voices = speech_set.ESPEAK_VOICES
    texts = speech_set.utterances()
    return [
        speech_set.clip(voices[n % len(voices)], index, texts[index])
        for n, index in enumerate(SAMPLE)
    ]


async def hear_sample(engine: EmbeddedEngine) -> list[tuple[str, str]]:
    """The sample through a real session: server VAD cuts each turn, Whisper writes it down;
    (said, heard) for each clip."""
    clips = sample_clips()
    listen_only = pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SERVER_VAD, create_response=False)
    driver = await open_driver(engine, turn_detection=listen_only)
    try:
        for clip in clips:
            # A clip ends 500 ms after its speech; 400 ms more and VAD has surely ended the turn.
            await driver.stream(clip.pcm16() + bytes(2 * 16 * 400))
        await driver.until(
            "input_transcription",
            lambda _: len(driver.of("input_transcription")) == len(clips),
            timeout_s=120,
        )
    finally:
        await driver.close()
    heard = [e.input_transcription.transcript for e in driver.of("input_transcription")]
    return [(clip.text, text) for clip, text in zip(clips, heard, strict=True)]


async def test_the_engine_hears_a_sample_of_the_set(engine: EmbeddedEngine) -> None:
    pairs = await hear_sample(engine)
    assert word_error_rate.total(pairs).rate <= MAX_SAMPLE_WER, pairs
