"""The answer written at the pause that may end a turn (omni_grpc.engine.embedded.early_answer),
with the real parts: espeak-ng speaks, Silero and Whisper hear, SmolLM2 writes.

The audio is sent in steps, and at the moment that matters (inside the silence, before it ends
the turn) the test waits until the language model was asked: on a busy machine Whisper may
take longer than the silence, and then no answer is written early, which is right but is not
what these tests are about.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.engine.embedded.early_answer import EarlyAnswer
from omni_grpc.engine.embedded.rescoring import LmRescorer
from omni_grpc.engine.embedded.responder import EchoResponder, Request, SmolResponder, TextStream
from omni_grpc.wire import pb

from .conftest import speech
from .driver import IN_BYTES_PER_MS, Driver, open_driver, response_events, said


@pytest.fixture(scope="module")
def smol_engine() -> Iterator[EmbeddedEngine]:
    built = EmbeddedEngine({"responder": "smollm2"})
    built.load()
    yield built
    asyncio.run(built.stop())


def test_the_language_model_also_chooses_among_whisper_s_readings(
    smol_engine: EmbeddedEngine,
) -> None:
    """asr_rescoring is auto: on wherever SmolLM2 is loaded for the answers."""
    assert smol_engine.runtime is not None
    assert isinstance(smol_engine.runtime.asr.reranker, LmRescorer)


class Asks:
    """Every request the engine's SmolLM2 responder gets, with the stream it returned and
    whether speech_stopped had been sent by then."""

    def __init__(self, responder: SmolResponder) -> None:
        self.made: list[tuple[Request, TextStream, bool]] = []
        self.driver: Driver | None = None
        self._responder = responder
        self._reply = responder.reply

    def __enter__(self) -> Asks:
        def reply(request: Request) -> TextStream:
            stream = self._reply(request)
            stopped = self.driver is not None and bool(self.driver.of("speech_stopped"))
            self.made.append((request, stream, stopped))
            return stream

        self._responder.reply = reply  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        del self._responder.reply

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(30):
            while len(self.made) < count:  # noqa: ASYNC110 (the model thread answers no event)
                await asyncio.sleep(0.01)


class Said:
    """Every phrase the engine's voice is asked to synthesize."""

    def __init__(self, engine: EmbeddedEngine) -> None:
        assert engine.runtime is not None
        self.phrases: list[str] = []
        self._voice = engine.runtime.tts
        self._synthesize = self._voice.synthesize

    def __enter__(self) -> Said:
        async def synthesize(text: str, voice: str = "en-us") -> bytes:
            self.phrases.append(text)
            return await self._synthesize(text, voice)

        self._voice.synthesize = synthesize  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        del self._voice.synthesize


class Voice:
    """A voice that makes a byte per character, and notes what it was asked."""

    first_words = 4

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    async def synthesize(self, text: str, voice: str = "") -> bytes:
        self.asked.append((text, voice))
        return b"x" * len(text)


def _asking(*turns: tuple[str, str], seed: int = 1) -> Request:
    return Request(instructions="", turns=list(turns), max_tokens=50, temperature=0.0, seed=seed)


async def test_an_early_answer_fits_only_the_same_request_to_the_same_responder() -> None:
    echo, voice = EchoResponder(), Voice()
    asked = _asking(("user", "what time is it"))
    early = EarlyAnswer(1000.0, asked, echo, (voice, "en-gb"))
    assert early.fits(_asking(("user", "what time is it"), seed=7), echo)  # any seed
    assert not early.fits(_asking(("user", "what time is it now")), echo)
    assert not early.fits(asked, EchoResponder())
    text = "".join([piece async for piece in early.pieces()])
    assert text == "You said: what time is it."
    # Its first phrase was synthesized as it was written; the player's voice hands that out
    # once, for the same text and voice name, and synthesizes everything else.
    prepared = early.voice(voice)
    assert await prepared.synthesize("You said: ", "en-gb") == b"x" * 10
    assert voice.asked == [("You said: ", "en-gb")]
    assert await prepared.synthesize("You said: ", "en-gb") == b"x" * 10
    assert voice.asked == [("You said: ", "en-gb"), ("You said: ", "en-gb")]
    another = Voice()  # another voice: what was made ahead is not its to hand out
    assert await early.voice(another).synthesize("You said: ", "en-gb") == b"x" * 10
    assert another.asked == [("You said: ", "en-gb")]
    other = early.voice(voice)
    assert await other.synthesize("what time is it.", "en-gb") == b"x" * 16


async def send_waiting(driver: Driver, pcm: bytes, at_ms: float, asks: Asks, count: int) -> None:
    """Sends ``pcm`` in 20 ms steps; at ``at_ms`` waits until ``count`` requests were made."""
    cut = int(at_ms) * IN_BYTES_PER_MS
    await driver.stream(pcm[:cut], step=True)
    await asks.wait_for(count)
    await driver.stream(pcm[cut:], step=True)


async def direct_answer(engine: EmbeddedEngine, request: Request) -> str:
    assert engine.runtime is not None and engine.runtime.smol is not None
    return "".join([piece async for piece in engine.runtime.smol.reply(request).pieces])


async def test_the_answer_is_written_in_the_silence_and_spoken_once_the_turn_ends(
    smol_engine: EmbeddedEngine,
) -> None:
    assert smol_engine.runtime is not None and smol_engine.runtime.smol is not None
    scene = speech.Scene().pause(300).speak("What is the capital of France?").pause(900)
    ((_, speech_end, _),) = scene.segments
    with Asks(smol_engine.runtime.smol) as asks, Said(smol_engine) as voice:
        driver = asks.driver = await open_driver(smol_engine)
        try:
            # 250 ms into the silence: past the pause (~100 ms), before the stop (500 ms).
            await send_waiting(driver, scene.pcm16(), speech_end + 250, asks, 1)
            done = (await driver.until("response_done")).response_done.response
        finally:
            await driver.close()
    ((request, _, stopped_then),) = asks.made  # asked once, at the pause, not again
    assert not stopped_then
    heard = driver.of("input_transcription")[0].input_transcription.transcript
    assert request.turns == [("user", heard)]
    assert done.status == pb.RESPONSE_STATUS_COMPLETED
    spoken = said(response_events(driver.seen, done.id))
    assert spoken and spoken == await direct_answer(smol_engine, request)
    assert done.output[0].content[0].transcript == spoken
    # The first phrase was synthesized ahead, and the player took that audio: no phrase was
    # synthesized twice.
    assert "".join(voice.phrases) == spoken


async def test_speech_after_the_pause_drops_the_early_answer(smol_engine: EmbeddedEngine) -> None:
    assert smol_engine.runtime is not None and smol_engine.runtime.smol is not None
    scene = (
        speech.Scene()
        .pause(300)
        .speak("What is the capital")
        .pause(700)
        .speak("of France?")
        .pause(1500)
    )
    (_, first_end, _), _ = scene.segments
    detection = pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SERVER_VAD, silence_duration_ms=1200)
    with Asks(smol_engine.runtime.smol) as asks:
        driver = asks.driver = await open_driver(smol_engine, turn_detection=detection)
        try:
            await send_waiting(driver, scene.pcm16(), first_end + 400, asks, 1)
            done = (await driver.until("response_done")).response_done.response
        finally:
            await driver.close()
    (early, early_stream, _), (final, _, stopped_then) = asks.made
    assert early_stream._stop.is_set()  # the model was told to stop writing it
    assert len(driver.of("speech_stopped")) == 1
    assert stopped_then
    heard = driver.of("input_transcription")[0].input_transcription.transcript
    assert final.turns == [("user", heard)]
    assert early.turns != final.turns
    spoken = said(response_events(driver.seen, done.id))
    assert spoken == await direct_answer(smol_engine, final)


async def test_two_sessions_answered_early_at_once_each_get_their_own_answer(
    smol_engine: EmbeddedEngine,
) -> None:
    """The sessions share one model and its cache of the last prompt: each early answer must
    still be the model's answer to its own conversation."""
    assert smol_engine.runtime is not None and smol_engine.runtime.smol is not None
    scenes = [
        speech.Scene().pause(300).speak(question).pause(900)
        for question in ("What is the capital of Italy?", "How many days are there in a week?")
    ]
    with Asks(smol_engine.runtime.smol) as asks:
        drivers = [await open_driver(smol_engine) for _ in scenes]
        try:
            cuts = [(int(s.segments[0][1]) + 250) * IN_BYTES_PER_MS for s in scenes]
            sends = list(zip(drivers, [s.pcm16() for s in scenes], cuts, strict=True))
            await asyncio.gather(*(d.stream(pcm[:cut], step=True) for d, pcm, cut in sends))
            await asks.wait_for(2)  # both answers are being written, neither turn has ended
            await asyncio.gather(*(d.stream(pcm[cut:], step=True) for d, pcm, cut in sends))
            dones = [(await d.until("response_done")).response_done.response for d in drivers]
        finally:
            for driver in drivers:
                await driver.close()
    assert len(asks.made) == 2  # asked once each, at the pause
    for driver, done in zip(drivers, dones, strict=True):
        heard = driver.of("input_transcription")[0].input_transcription.transcript
        (request,) = [asked for asked, _, _ in asks.made if asked.turns == [("user", heard)]]
        spoken = said(response_events(driver.seen, done.id))
        assert spoken and spoken == await direct_answer(smol_engine, request)
