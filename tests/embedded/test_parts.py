"""The embedded engine's parts one by one: model files, VAD and turn rules, ASR, TTS, the
sentence splitter, the responders and the options."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from omni_grpc.engine.embedded import EmbeddedEngine, EmbeddedOptions
from omni_grpc.engine.embedded.models.asr import drop_repeat
from omni_grpc.engine.embedded.models.gguf_file import GgufError, GgufFile
from omni_grpc.engine.embedded.models.lm import SmolLM, find_smollm2
from omni_grpc.engine.embedded.models.whisper_models import (
    BASE_SHA256,
    TINY_EN_SHA256,
    base_files,
    mend_merges,
    tiny_en_dir,
    whisper_files,
)
from omni_grpc.engine.embedded.responder import EchoResponder, Request, SmolResponder
from omni_grpc.engine.kit.tts import SentenceSplitter, voice_name
from omni_grpc.engine.kit.turn_detection import (
    SpeechPause,
    SpeechStart,
    SpeechStop,
    TurnDetector,
)

from .conftest import speech, speech_set
from .hearing import heard_as


def test_the_whisper_models_are_the_ones_we_pinned() -> None:
    digest = hashlib.sha256((tiny_en_dir() / "model.bin").read_bytes()).hexdigest()
    assert digest == TINY_EN_SHA256
    # Whisper base's model.bin is its two packages' halves joined.
    assert hashlib.sha256(base_files()["model.bin"]).hexdigest() == BASE_SHA256
    assert whisper_files("base").multilingual and not whisper_files("tiny.en").multilingual
    with pytest.raises(ValueError, match="unknown Whisper model"):
        whisper_files("large")


def test_whisper_base_spells_a_text_as_it_spells_its_own_readings() -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(base_files()["tokenizer.json"].decode())
    space = tokenizer.token_to_id("Ġ")
    assert tokenizer.encode(" the", add_special_tokens=False).ids == [264]
    # With every merge, a word never starts with a lone space token: the space joins the
    # word's first letter before anything else. Without the first merge, " the", " two" and
    # " tonight" did, in most lines of the set.
    for text in speech_set.utterances():
        ids = tokenizer.encode(" " + text, add_special_tokens=False).ids
        assert space not in ids, text
        assert tokenizer.decode(ids) == " " + text


def _bpe(merges: list[str]) -> bytes:
    """A byte-level BPE tokenizer.json whose merges are ``merges``: tokens 0-255 are bytes
    (here only the three it needs, at their ranks), then one per merge."""
    vocab = {"Ġ": 220, "t": 83, "a": 64, "Ġt": 256, "Ġa": 257, "Ġta": 258}
    return json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": merges}}).encode()


def test_a_lost_first_merge_is_put_back_and_other_damage_refused() -> None:
    whole = _bpe(["Ġ t", "Ġ a", "Ġt a"])
    assert mend_merges(whole) == whole
    mended = json.loads(mend_merges(_bpe(["Ġ a", "Ġt a"])))
    assert mended["model"]["merges"] == ["Ġ t", "Ġ a", "Ġt a"]
    with pytest.raises(ValueError, match="do not make its vocabulary"):
        mend_merges(_bpe(["Ġ t", "Ġt a", "Ġ a"]))


def detect(engine: EmbeddedEngine, pcm16: bytes) -> list[SpeechStart | SpeechPause | SpeechStop]:
    assert engine.runtime is not None
    stream = engine.runtime.vad.stream()
    detector = TurnDetector()
    events = [detector.push(k, p) for k, p in enumerate(stream.feed(pcm16))]
    return [event for event in events if event is not None]


def test_vad_finds_each_phrase_within_150_ms(engine: EmbeddedEngine) -> None:
    scene = speech.standard_scenes()["two_turns"]
    events = detect(engine, scene.pcm16())
    events = [e for e in events if not isinstance(e, SpeechPause)]
    assert [type(e) for e in events] == [SpeechStart, SpeechStop] * 2
    for (start, end, _), began, ended in zip(
        scene.segments, events[::2], events[1::2], strict=True
    ):
        assert isinstance(began, SpeechStart) and isinstance(ended, SpeechStop)
        assert abs(began.start_ms - start) <= 150
        assert abs(ended.end_ms - end) <= 150
        assert began.detected_ms - began.start_ms <= 96  # confirmed within 3 windows


def test_vad_ignores_100_ms_noise_bursts(engine: EmbeddedEngine) -> None:
    assert detect(engine, speech.standard_scenes()["noise_bursts"].pcm16()) == []


def test_a_burst_shorter_than_min_speech_never_starts_a_turn() -> None:
    detector = TurnDetector(min_speech_ms=64)
    assert [detector.push(k, p) for k, p in enumerate([0.9, 0.1, 0.0])] == [None] * 3
    # Two windows over the threshold do: the onset is the first of them.
    events = [detector.push(k, p) for k, p in enumerate([0.0, 0.9, 0.9], start=3)]
    assert events[-1] == SpeechStart(start_ms=4 * 32, detected_ms=6 * 32)


def test_speech_stops_after_the_silence_duration_and_reports_where_it_began() -> None:
    detector = TurnDetector(silence_ms=96)
    for k in range(4):
        detector.push(k, 0.9)
    # A dip that stays above the release threshold (0.35) is still speech.
    assert detector.push(4, 0.4) is None
    assert [detector.push(k, 0.0) for k in (5, 6)] == [None, None]
    assert detector.push(7, 0.0) == SpeechStop(end_ms=5 * 32, detected_ms=8 * 32)
    assert not detector.speaking


def test_a_pause_is_reported_before_the_stop_and_forgotten_if_speech_goes_on() -> None:
    detector = TurnDetector(silence_ms=500)
    for k in range(4):
        detector.push(k, 0.9)
    events = [detector.push(k, 0.0) for k in range(4, 8)]
    assert events == [None, None, SpeechPause(end_ms=4 * 32, detected_ms=7 * 32), None]
    detector.push(8, 0.9)  # speech goes on: the next pause is a new one
    later = [detector.push(k, 0.0) for k in range(9, 9 + 16)]
    assert [e for e in later if e is not None] == [
        SpeechPause(end_ms=9 * 32, detected_ms=12 * 32),
        SpeechStop(end_ms=9 * 32, detected_ms=25 * 32),
    ]


def test_whisper_writes_down_what_espeak_said(engine: EmbeddedEngine) -> None:
    assert engine.runtime is not None
    scene = speech.Scene().pause(300).speak("please turn on the kitchen lights").pause(500)
    text = engine.runtime.asr.transcribe(scene.pcm16())
    assert heard_as("please turn on the kitchen lights", text), text
    assert engine.runtime.asr.transcribe(speech.Scene().add(speech.noise(1000)).pcm16()) == ""
    assert engine.runtime.asr.transcribe(bytes(32000)) == ""


@pytest.mark.parametrize(
    ("decoded", "kept"),
    [
        # Whisper starting the turn over in the padding, as it did on the speech set.
        ("Close the blinds in the office. Close the blinds in", "Close the blinds in the office."),
        ("Wake me up at 6.45 tomorrow. Wake me up at 6.", "Wake me up at 6.45 tomorrow."),
        (
            "Order more coffee filters. Order more coffee filters. Order",
            "Order more coffee filters.",
        ),
        # Repeats that may be meant, or are no repeat of the whole.
        ("New York, New York", "New York, New York"),
        ("no no no no", "no no no no"),
        ("Play it again and again and again", "Play it again and again and again"),
        ("What is the capital of France?", "What is the capital of France?"),
    ],
)
def test_a_turn_said_over_again_is_kept_once(decoded: str, kept: str) -> None:
    assert drop_repeat(decoded) == kept


async def test_espeak_speaks_24_khz_pcm16(engine: EmbeddedEngine) -> None:
    assert engine.runtime is not None
    pcm = await engine.runtime.tts.synthesize("Hello there.", "alloy")  # an OpenAI voice name
    samples = np.frombuffer(pcm, dtype="<i2")
    assert 0.5 < samples.size / 24000 < 2.0
    assert np.abs(samples).max() > 3000
    assert await engine.runtime.tts.synthesize("  ") == b""


def test_voice_names_are_espeak_voices_or_the_default() -> None:
    assert voice_name("en-gb") == "en-gb"
    assert voice_name("alloy") == "en-us"
    assert voice_name("-x --stdout") == "en-us"


def test_sentences_come_out_as_soon_as_they_end() -> None:
    splitter = SentenceSplitter()
    got = []
    for piece in ["Hel", "lo there. How", " are you? I am", " fine", "\nthanks"]:
        got.append(splitter.push(piece))
    assert got == [[], ["Hello there. "], ["How are you? "], [], ["I am fine\n"]]
    assert splitter.flush() == ["thanks"]
    long = SentenceSplitter().push("word, " * 60)
    assert long and all(len(sentence) <= 160 for sentence in long)


def test_the_first_phrase_does_not_end_on_a_word_that_leans_on_the_next() -> None:
    def first(text: str, first_words: int) -> str:
        splitter = SentenceSplitter(first_words)
        for word in text.split(" "):
            if phrases := splitter.push(word + " "):
                return phrases[0]
        return splitter.flush()[0]

    assert first("Six plus three is nine and more.", 3) == "Six plus three "
    assert first("Keep it in a paper bag or a box.", 3) == "Keep it in a paper "
    assert first("Yes it is, and it is big.", 4) == "Yes it is, "
    # It waits three words at most: a run of such words is cut all the same.
    assert first("It is in the of a to the end.", 2) == "It is in the of "


async def collect(reply: object) -> str:
    return "".join([piece async for piece in reply.pieces])  # type: ignore[attr-defined]


async def test_echo_repeats_the_users_last_turn() -> None:
    request = Request(
        instructions="",
        turns=[("user", "hi"), ("assistant", "hello"), ("user", "what time is it?")],
        max_tokens=100,
        temperature=0.0,
        seed=1,
    )
    reply = EchoResponder().reply(request)
    assert await collect(reply) == "You said: what time is it."
    assert reply.finish == "stop"
    short = EchoResponder().reply(
        Request(
            instructions="",
            turns=[("user", "one two three")],
            max_tokens=2,
            temperature=0.0,
            seed=1,
        )
    )
    assert await collect(short) == "You said:"
    assert short.finish == "max_output_tokens"


def test_the_gguf_reader_reads_smollm2_and_refuses_other_files(tmp_path: Path) -> None:
    model = GgufFile(find_smollm2())
    assert model.metadata["general.architecture"] == "llama"
    tokens = model.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, list) and len(tokens) == 49152 and tokens[1] == "<|im_start|>"
    assert model.weight("blk.0.attn_q.weight").shape == (576, 576)  # (out, in)
    assert model.weight("token_embd.weight").shape == (49152, 576)
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(GgufError):
        GgufFile(bogus)


@pytest.fixture(scope="module")
def smol() -> SmolLM:
    return SmolLM(find_smollm2())


@pytest.mark.slow
async def test_smollm2_answers_and_streams(smol: SmolLM, engine: EmbeddedEngine) -> None:
    assert engine.runtime is not None
    responder = SmolResponder(smol, engine.runtime.executor)
    request = Request(
        instructions="You are a helpful assistant.",
        turns=[("user", "What is the capital of France?")],
        max_tokens=24,
        temperature=0.0,
        seed=1,
    )
    reply = responder.reply(request)
    pieces = [piece async for piece in reply.pieces]
    assert len(pieces) > 3  # streamed token by token, not in one piece
    assert "Paris" in "".join(pieces)
    assert reply.finish in ("stop", "max_output_tokens") and 0 < reply.tokens <= 24


@pytest.mark.slow
async def test_a_stopped_reply_stops_the_model_thread(smol: SmolLM, engine: EmbeddedEngine) -> None:
    assert engine.runtime is not None
    responder = SmolResponder(smol, engine.runtime.executor)
    reply = responder.reply(
        Request(
            instructions="",
            turns=[("user", "Tell me a long story.")],
            max_tokens=200,
            temperature=0.0,
            seed=1,
        )
    )
    first = await anext(reply.pieces)
    assert first
    reply.stop()  # what a cancelled response does
    rest = [piece async for piece in reply.pieces]  # ends promptly: the thread stopped
    assert reply.finish == "cancelled"
    assert len(rest) < 10 and reply.tokens < 20


def _text_alone(smol: SmolLM, prompt: list[int]) -> str:
    return "".join(
        smol.generate(prompt, max_tokens=16, temperature=0.0, seed=0, cancelled=lambda: False)
    )


def _in_a_thread(function: Callable[[], str]) -> tuple[threading.Thread, list[str]]:
    out: list[str] = []
    thread = threading.Thread(target=lambda: out.append(function()), daemon=True)
    thread.start()
    return thread, out


def test_two_answers_are_written_side_by_side_each_as_it_would_be_alone(smol: SmolLM) -> None:
    first = smol.chat_prompt("Answer in one sentence.", [("user", "Name a large animal.")])
    second = smol.chat_prompt("Answer in one sentence.", [("user", "What is two plus two?")])
    expected = (_text_alone(smol, first), _text_alone(smol, second))
    writing = smol.generate(first, max_tokens=16, temperature=0.0, seed=0, cancelled=bool)
    opening = next(writing)  # the first answer holds its cache, half written
    # A second answer is written meanwhile: it does not wait for the first to end.
    thread, out = _in_a_thread(lambda: _text_alone(smol, second))
    thread.join(60)
    assert not thread.is_alive() and out == [expected[1]]
    # And the first goes on where it was, its cache untouched by the second.
    assert opening + "".join(writing) == expected[0]


def test_a_caller_beyond_the_caches_waits_for_one_to_be_given_back(smol: SmolLM) -> None:
    prompts = [
        smol.chat_prompt("Answer in one sentence.", [("user", question)])
        for question in ("Name a colour.", "Name a fruit.", "Name a city.")
    ]
    expected = _text_alone(smol, prompts[2])
    holding = [
        smol.generate(prompt, max_tokens=16, temperature=0.0, seed=0, cancelled=bool)
        for prompt in prompts[:2]
    ]
    for writing in holding:
        next(writing)  # both caches lent
    thread, out = _in_a_thread(lambda: _text_alone(smol, prompts[2]))
    thread.join(0.5)
    assert thread.is_alive() and not out  # waiting, not writing into a cache in use
    holding[0].close()  # the first caller gives its cache back
    thread.join(60)
    assert not thread.is_alive() and out == [expected]
    holding[1].close()


def test_a_prompt_prefilled_into_every_cache_is_reused_as_if_computed(smol: SmolLM) -> None:
    prompt = smol.chat_prompt("You are terse.", [("user", "Say a greeting.")])
    expected = _text_alone(smol, smol.chat_prompt("You are kind.", [("user", "Hi.")]))
    smol.prefill(prompt)
    # One caller holds a cache; the next gets the other, which holds the prompt by copy: only
    # the prompt's last token is computed there, after the copied keys and values.
    writing = smol.generate(prompt, max_tokens=16, temperature=0.0, seed=0, cancelled=bool)
    opening = next(writing)
    thread, out = _in_a_thread(lambda: _text_alone(smol, prompt))
    thread.join(60)
    assert not thread.is_alive()
    assert out == [opening + "".join(writing)]
    # The caches hold other turns afterwards and still answer as before.
    assert _text_alone(smol, smol.chat_prompt("You are kind.", [("user", "Hi.")])) == expected


def test_options_are_checked() -> None:
    assert EmbeddedOptions.parse({"responder": "echo", "chunk_ms": "50"}).chunk_ms == 50
    with pytest.raises(ValueError, match="unknown embedded option"):
        EmbeddedOptions.parse({"colour": "blue"})
    with pytest.raises(ValueError, match="responder"):
        EmbeddedOptions.parse({"responder": "gpt"})
    with pytest.raises(ValueError, match="chunk_ms"):
        EmbeddedOptions.parse({"chunk_ms": "1000"})
    with pytest.raises(ValueError, match="not a valid value"):
        EmbeddedOptions.parse({"words_per_minute": "fast"})
    assert not EmbeddedEngine({"server_vad": "off"}).features.supports_server_vad


def test_a_pause_bar_of_one_window_reports_the_pause_at_its_first_silent_window() -> None:
    # What speech over a held reply is heard with (overlap_pause_ms): its words read, and the
    # reply perhaps resumed, 64 ms sooner than after a turn's pause.
    detector = TurnDetector(silence_ms=500, pause_ms=32)
    for k in range(4):
        detector.push(k, 0.9)
    assert detector.push(4, 0.0) == SpeechPause(end_ms=4 * 32, detected_ms=5 * 32)


def test_speech_over_a_reply_is_read_by_the_smaller_whisper(engine: EmbeddedEngine) -> None:
    # The reply waits on this reading (backchannel or interruption?), so by default it is
    # tiny.en's, beside the turns' base; naming the turns' model loads no second one.
    assert (engine.runtime.asr.model, engine.runtime.overlap_reader.model) == ("base", "tiny.en")
    with pytest.raises(ValueError, match="overlap_asr_model"):
        EmbeddedOptions.parse({"overlap_asr_model": "large"})
    for bad in ({"overlap_min_speech_ms": "-1"}, {"overlap_pause_ms": "8"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            EmbeddedOptions.parse(bad)
