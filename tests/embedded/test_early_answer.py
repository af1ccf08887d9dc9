"""The answer written at the pause that may end a turn (omni_grpc.engine.embedded.early_answer),
with the real parts: espeak-ng speaks, Silero and Whisper hear, SmolLM2 writes.

The audio is sent in steps, and at the moment that matters (inside the silence, before it ends
the turn) the test waits until the language model was asked: on a busy machine Whisper may
take longer than the silence, and then no answer is written early, which is right but is not
what these tests are about.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.engine.embedded.early_answer import EarlyAnswer
from omni_grpc.engine.embedded.models.asr import Hypothesis
from omni_grpc.engine.embedded.models.rescoring import LmRescorer
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

    def __init__(self, responder: SmolResponder, said: Said | None = None) -> None:
        self.made: list[tuple[Request, TextStream, bool]] = []
        self.driver: Driver | None = None
        # How many phrases ``said`` had been asked to synthesize before each request.
        self.said_before: list[int] = []
        self._said = said
        self._responder = responder
        self._reply = responder.reply

    def __enter__(self) -> Asks:
        def reply(request: Request) -> TextStream:
            self.said_before.append(len(self._said.phrases) if self._said else 0)
            stream = self._reply(request)
            stopped = self.driver is not None and bool(self.driver.of("speech_stopped"))
            self.made.append((request, stream, stopped))
            return stream

        self._responder.reply = reply  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        del self._responder.reply

    async def wait_for(self, count: int) -> None:
        await until(lambda: len(self.made) >= count)

    def answer_to(self, heard: Heard) -> bool:
        """Whether a transcription ended and an answer to its text was asked."""
        return bool(heard.texts) and any(
            request.turns[-1] == ("user", heard.texts[-1]) for request, _, _ in self.made
        )


async def until(ready: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while not ready():  # noqa: ASYNC110 (the model threads answer no event)
            await asyncio.sleep(0.01)


class Heard:
    """Every transcript the engine's recognizer returned, in order."""

    def __init__(self, engine: EmbeddedEngine) -> None:
        assert engine.runtime is not None
        self.texts: list[str] = []
        self._asr = engine.runtime.asr
        self._transcribe = self._asr.transcribe

    def __enter__(self) -> Heard:
        def transcribe(*args: Any, **kwargs: Any) -> str:
            text = self._transcribe(*args, **kwargs)
            self.texts.append(text)
            return text

        self._asr.transcribe = transcribe  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        del self._asr.transcribe


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
    assert not early.fits(dataclasses.replace(asked, tools=True), echo)  # it may act: asked apart
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


async def send_waiting(driver: Driver, pcm: bytes, at_ms: float, ready: Callable[[], bool]) -> None:
    """Sends ``pcm`` in 20 ms steps; at ``at_ms`` waits until ``ready()``."""
    cut = int(at_ms) * IN_BYTES_PER_MS
    await driver.stream(pcm[:cut], step=True)
    await until(ready)
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
    with (
        Said(smol_engine) as voice,
        Asks(smol_engine.runtime.smol, voice) as asks,
        Heard(smol_engine) as heard,
    ):
        driver = asks.driver = await open_driver(smol_engine)
        try:
            # 250 ms into the silence: past the pause (~100 ms), before the stop (500 ms),
            # once the pause's transcript is ready and its answer asked for.
            ready = partial(asks.answer_to, heard)
            await send_waiting(driver, scene.pcm16(), speech_end + 250, ready)
            done = (await driver.until("response_done")).response_done.response
        finally:
            await driver.close()
    # Asked at the pause only, never after the turn ended: first Whisper's likeliest reading
    # (beam-first, "What is the capital and friends?" here), then, while the silence lasts,
    # the transcript the language model chose, if that is another.
    assert not any(stopped_then for *_, stopped_then in asks.made)
    *dropped, (request, _, _) = asks.made
    heard_text = driver.of("input_transcription")[0].input_transcription.transcript
    assert request.turns == [("user", heard_text)]
    assert len(dropped) <= 1 and all(stream._stop.is_set() for _, stream, _ in dropped)
    assert done.status == pb.RESPONSE_STATUS_COMPLETED
    spoken = said(response_events(driver.seen, done.id))
    assert spoken and spoken == await direct_answer(smol_engine, request)
    assert done.output[0].content[0].transcript == spoken
    # The answer's first phrase was synthesized ahead, and the player took that audio: no
    # phrase of it was synthesized twice.
    assert "".join(voice.phrases[asks.said_before[-1] :]) == spoken


async def test_the_answer_starts_on_whisper_s_likeliest_reading_while_the_lm_chooses(
    smol_engine: EmbeddedEngine,
) -> None:
    """Where SmolLM2 re-ranks Whisper's readings, the early answer does not wait for it."""
    runtime = smol_engine.runtime
    assert runtime is not None and runtime.smol is not None and runtime.asr.reranker is not None
    reranker = runtime.asr.reranker
    choose = reranker.choose
    asked_before_choosing: list[tuple[str, str]] = []
    likeliest: list[str] = []

    def choose_once_asked(hypotheses: Sequence[Hypothesis]) -> int:
        # On the model thread: holds the choice until an answer was asked (for 10 s at most,
        # on the previous code it never was), and notes what that answer was asked about.
        if not likeliest:
            likeliest.append(hypotheses[0].text)
            deadline = time.monotonic() + 10
            while not asks.made and time.monotonic() < deadline:
                time.sleep(0.01)
            asked_before_choosing.extend(request.turns[-1] for request, _, _ in asks.made)
        return choose(hypotheses)

    scene = speech.Scene().pause(300).speak("What is the capital of France?").pause(900)
    ((_, speech_end, _),) = scene.segments
    with Asks(runtime.smol) as asks, Heard(smol_engine) as heard:
        reranker.choose = choose_once_asked  # type: ignore[method-assign]
        try:
            driver = asks.driver = await open_driver(smol_engine)
            try:
                ready = partial(asks.answer_to, heard)
                await send_waiting(driver, scene.pcm16(), speech_end + 250, ready)
                await driver.until("response_done")
            finally:
                await driver.close()
        finally:
            del reranker.choose
    assert asked_before_choosing == [("user", likeliest[0])]
    heard_text = driver.of("input_transcription")[0].input_transcription.transcript
    assert asks.made[-1][0].turns == [("user", heard_text)]
    assert not any(stopped_then for *_, stopped_then in asks.made)


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
    with Asks(smol_engine.runtime.smol) as asks, Heard(smol_engine) as heard:
        driver = asks.driver = await open_driver(smol_engine, turn_detection=detection)
        try:
            ready = partial(asks.answer_to, heard)
            await send_waiting(driver, scene.pcm16(), first_end + 400, ready)
            done = (await driver.until("response_done")).response_done.response
        finally:
            await driver.close()
    # At the pause: Whisper's likeliest reading, and the chosen transcript if another.
    *early, (final, _, stopped_then) = asks.made
    assert 1 <= len(early) <= 2
    assert all(stream._stop.is_set() for _, stream, _ in early)  # the model was told to stop
    assert len(driver.of("speech_stopped")) == 1
    assert stopped_then
    heard_text = driver.of("input_transcription")[0].input_transcription.transcript
    assert final.turns == [("user", heard_text)]
    assert all(request.turns != final.turns for request, _, _ in early)
    spoken = said(response_events(driver.seen, done.id))
    assert spoken == await direct_answer(smol_engine, final)


async def test_two_sessions_answered_early_at_once_each_get_their_own_answer(
    smol_engine: EmbeddedEngine,
) -> None:
    """The sessions share one model and its caches: each early answer must still be the
    model's answer to its own conversation."""
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


async def test_an_answer_begun_at_a_pause_and_dropped_leaves_no_trace(
    smol_engine: EmbeddedEngine,
) -> None:
    """The answer begun at a pause, its first phrase's audio made too, then the user speaks on:
    nothing of it reaches the conversation, the transcript or the audio the client hears."""
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
    with (
        Said(smol_engine) as voice,
        Asks(smol_engine.runtime.smol, voice) as asks,
        Heard(smol_engine) as heard,
    ):
        driver = asks.driver = await open_driver(smol_engine, turn_detection=detection)
        try:
            # Inside the pause, once the early answer was asked and its first phrase is being
            # synthesized: the answer begun, its audio made ahead.
            def begun() -> bool:
                return asks.answer_to(heard) and len(voice.phrases) > asks.said_before[0]

            await send_waiting(driver, scene.pcm16(), first_end + 400, begun)
            done = (await driver.until("response_done")).response_done.response
        finally:
            await driver.close()
    *early, (final, _, _) = asks.made
    assert early and all(stream._stop.is_set() for _, stream, _ in early)
    ahead = voice.phrases[asks.said_before[0] : asks.said_before[-1]]
    assert ahead, "no phrase of the early answer was synthesized ahead"
    kinds = [event.WhichOneof("event") for event in driver.seen]
    stopped_at = kinds.index("speech_stopped")
    # The conversation: one user turn, the whole sentence; one response, to it.
    assert kinds.count("speech_stopped") == kinds.count("input_committed") == 1
    assert kinds.count("response_created") == 1 and kinds.index("response_created") > stopped_at
    heard_text = driver.of("input_transcription")[0].input_transcription.transcript
    assert final.turns == [("user", heard_text)]
    # Nothing of a response was sent before the turn ended.
    answer_kinds = {"output_audio_delta", "output_audio_transcript_delta", "output_text_delta"}
    assert not answer_kinds & set(kinds[:stopped_at])
    # The audio and its transcript: the final answer's only, from its start, once.
    deltas = [e.output_audio_delta for e in driver.of("output_audio_delta")]
    assert deltas and {d.response_id for d in deltas} == {done.id}
    assert deltas[0].start_ms == 0.0
    assert all(
        abs(a.start_ms + a.duration_ms - b.start_ms) < 1e-6 for a, b in itertools.pairwise(deltas)
    )
    spoken = said(response_events(driver.seen, done.id))
    assert spoken == await direct_answer(smol_engine, final)
    assert done.output[0].content[0].transcript == spoken
    # Every phrase synthesized after the final answer was asked is the final answer's.
    assert "".join(voice.phrases[asks.said_before[-1] :]) == spoken


async def test_a_response_offered_tools_is_asked_as_one_that_may_act(
    smol_engine: EmbeddedEngine,
) -> None:
    """Under the default instructions the assistant is told it cannot act; a response with
    tools can, through a call, so the responder is asked with ``tools`` (responder.py)."""
    assert smol_engine.runtime is not None and smol_engine.runtime.smol is not None
    light = pb.FunctionTool(name="switch_light", description="Switches a light on or off.")
    offered = {
        "tools": pb.ToolSet(tools=[light]),
        "tool_choice": pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_NONE),  # no call: words
    }
    with Asks(smol_engine.runtime.smol) as asks:
        for config in ({}, offered):
            driver = await open_driver(smol_engine, output_modalities=[pb.MODALITY_TEXT], **config)
            try:
                text = pb.AppendInputText(text="Turn on the kitchen lights.")
                await driver.send(append_input_text=text)
                await driver.send(create_response=pb.CreateResponse())
                await driver.until("response_done")
            finally:
                await driver.close()
    assert [request.tools for request, _, _ in asks.made] == [False, True]
