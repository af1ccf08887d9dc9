"""Words of a turn while it is spoken (``input_transcription_delta``): the stable-prefix rule on
its own, and the embedded engine sending them during a long utterance streamed in real time."""

from __future__ import annotations

import asyncio

import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.engine.embedded.partials import StableWords

from .conftest import speech
from .driver import IN_BYTES_PER_MS, Driver, open_driver
from .hearing import words

LONG = "please book a table for two at seven tonight and remind me to call my sister"
CHUNK_MS = 20


def test_only_words_two_hypotheses_agree_on_are_sent() -> None:
    stable = StableWords()
    assert stable.delta("Please") == ""  # one hypothesis: nothing agrees yet
    assert stable.delta("Please work at") == "Please"
    assert stable.delta("Please book a table") == ""  # "work" was never agreed on
    assert stable.delta("Please book a table for two") == " book a table"
    assert stable.sent == "Please book a table"


def test_a_revision_of_sent_words_sends_nothing_more() -> None:
    stable = StableWords()
    stable.delta("Turn off my")
    assert stable.delta("Turn off my life") == "Turn off my"
    assert stable.delta("Turn off the lights") == ""
    assert stable.delta("Turn off the lights in") == ""  # it disagrees with "my" for good
    assert stable.sent == "Turn off my"


async def stream_in_real_time(driver: Driver, pcm16: bytes) -> None:
    """Appends audio no faster than it plays, as a microphone would."""
    size = CHUNK_MS * IN_BYTES_PER_MS
    loop = asyncio.get_running_loop()
    began = loop.time()
    for index, start in enumerate(range(0, len(pcm16), size)):
        await driver.send(append_input_audio={"audio": pcm16[start : start + size]})
        await asyncio.sleep(max(0.0, began + (index + 1) * CHUNK_MS / 1000 - loop.time()))


def long_turn() -> bytes:
    return speech.Scene().pause(500).speak(LONG).pause(1000).pcm16()


async def test_words_arrive_while_a_long_turn_is_spoken(engine: EmbeddedEngine) -> None:
    driver = await open_driver(engine)
    try:
        await stream_in_real_time(driver, long_turn())
        await driver.until("input_transcription")
    finally:
        await driver.close()

    order = driver.kinds()
    deltas = driver.of("input_transcription_delta")
    assert deltas, order
    item_id = driver.of("speech_started")[0].speech_started.item_id
    assert {d.input_transcription_delta.item_id for d in deltas} == {item_id}
    assert {d.input_transcription_delta.content_index for d in deltas} == {0}
    last_delta = max(i for i, kind in enumerate(order) if kind == "input_transcription_delta")
    assert last_delta < order.index("speech_stopped")
    partial = "".join(d.input_transcription_delta.delta for d in deltas)
    final = driver.of("input_transcription")[0].input_transcription.transcript
    # The deltas are an early guess: most of their words begin the final transcript.
    heard, written = words(partial).split(), words(final).split()
    assert len(heard) >= 3, partial
    agree = sum(a == b for a, b in zip(heard, written, strict=False))
    assert agree >= 0.7 * len(heard), (partial, final)


@pytest.fixture(scope="module")
def quiet_engine() -> EmbeddedEngine:
    built = EmbeddedEngine({"responder": "echo", "partial_transcripts": "off"})
    built.load()
    return built


async def test_off_sends_only_the_final_transcript(quiet_engine: EmbeddedEngine) -> None:
    driver = await open_driver(quiet_engine)
    try:
        await stream_in_real_time(driver, long_turn())
        await driver.until("input_transcription")
    finally:
        await driver.close()
        await quiet_engine.stop()
    assert not driver.of("input_transcription_delta")
