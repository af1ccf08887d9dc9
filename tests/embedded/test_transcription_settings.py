"""What a session's transcription settings do to Whisper: the model it names, the language it
gives a multilingual model, the prompt (which Whisper follows the spelling of)."""

from __future__ import annotations

import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.engine.embedded.models.whisper_models import installed_models

from .conftest import speech


def test_the_engine_lists_its_installed_whispers_default_first(engine: EmbeddedEngine) -> None:
    assert engine.features.transcription_models == ("base", "tiny.en")
    assert installed_models("tiny.en") == ("tiny.en", "base")


def test_a_session_model_is_loaded_once_and_kept(engine: EmbeddedEngine) -> None:
    assert engine.runtime is not None
    assert engine.runtime.transcriber("") is engine.runtime.asr
    tiny = engine.runtime.transcriber("tiny.en")
    assert tiny.model == "tiny.en" and engine.runtime.transcriber("tiny.en") is tiny
    scene = speech.Scene().pause(300).speak("please turn on the kitchen lights").pause(500)
    assert "kitchen" in tiny.transcribe(scene.pcm16(), language="fr").lower()  # English only


def test_language_and_prompt_reach_the_decoder(engine: EmbeddedEngine) -> None:
    assert engine.runtime is not None
    asr = engine.runtime.asr
    german = asr._start_of("de")[0]
    assert asr._tokenizer.tokenizer.token_to_id("<|de|>") in german
    scene = speech.Scene().pause(300).speak("my name is zoe").pause(500)
    prompted = asr.transcribe(scene.pcm16(), prompt="Zoë and Anouk talk.")
    assert "Zoë" in prompted, prompted
    with pytest.raises(ValueError):
        asr.transcribe(scene.pcm16(), language="xx")  # a code Whisper does not know


def test_a_transcript_has_a_logprob_for_each_of_its_tokens(engine: EmbeddedEngine) -> None:
    assert engine.runtime is not None and engine.features.supports_transcription_logprobs
    asr = engine.runtime.asr
    pcm = speech.Scene().pause(300).speak("please turn on the kitchen lights").pause(500).pcm16()
    text = asr.transcribe(pcm)
    tokens = asr.token_logprobs(pcm, text)
    assert "".join(token for token, _ in tokens).strip() == text.strip()
    assert all(logprob <= 0.0 for _, logprob in tokens)
    # What was said is likelier than what was not.
    wrong = asr.token_logprobs(pcm, "the cat sat on a mat")
    assert sum(lp for _, lp in tokens) / len(tokens) > sum(lp for _, lp in wrong) / len(wrong)
    assert asr.token_logprobs(pcm, "") == []
