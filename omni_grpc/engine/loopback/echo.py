"""What the loopback says to a turn: the turn's own audio, or a tone for typed text, and plain
words about what it heard."""

from __future__ import annotations

import numpy as np

from omni_grpc import audio
from omni_grpc.engine.kit import UserInput
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, CANONICAL_OUTPUT_RATE_HZ

_TONE_MS_PER_CHAR = 60.0
_TONE_MAX_MS = 5000.0


def echo_audio(inputs: list[UserInput]) -> bytes:
    """The turn's audio in canonical output form, or a quiet tone as long as its text."""
    heard = b"".join(user.audio for user in inputs)
    if heard:
        samples = audio.decode(heard, pb.AUDIO_ENCODING_PCM16, CANONICAL_INPUT_RATE_HZ)
        resampled = audio.resample(samples, CANONICAL_INPUT_RATE_HZ, CANONICAL_OUTPUT_RATE_HZ)
        return audio.encode(resampled, pb.AUDIO_ENCODING_PCM16, CANONICAL_OUTPUT_RATE_HZ)
    chars = max(len(" ".join(_texts(inputs))), 1)
    return tone(min(chars * _TONE_MS_PER_CHAR, _TONE_MAX_MS))


def echo_words(inputs: list[UserInput]) -> str:
    """The loopback's words for a turn: what it heard, said plainly."""
    audio_ms = sum(user.audio_ms for user in inputs)
    texts = [user.text for user in inputs if user.text and not user.call_output]
    outputs = [user.text for user in inputs if user.call_output]
    said = [f"you said {audio_ms / 1000:.2f} seconds of audio"] if audio_ms else []
    wrote = [f'you wrote "{" ".join(texts)[:200]}"'] if texts else []
    returned = [f'the function returned "{" ".join(outputs)[:200]}"'] if outputs else []
    return " and ".join(said + wrote + returned) or "you sent an empty item"


def echo_transcript(audio_ms: float, settings: pb.InputTranscriptionConfig) -> str:
    """The loopback's transcript of a turn: how long it was, and the language and prompt the
    session gave its transcription, so a test sees both arrive."""
    words = f"{audio_ms / 1000:.2f} seconds of audio"
    if settings.language:
        words += f" in {settings.language}"
    if settings.prompt:
        words += f", prompted {settings.prompt[:200]!r}"
    return words


def input_tokens(inputs: list[UserInput]) -> int:
    """A fixed rule, so that usage can be checked: a token per 100 ms of audio and per word."""
    audio_ms = sum(user.audio_ms for user in inputs)
    return int(audio_ms // 100) + sum(len(text.split()) for text in _texts(inputs))


RECALL = "; earlier: "  # what starts the recall of an answer (option ``recall``)


def read_back(item: pb.ConversationItem, text: str) -> str:
    """An item's words as the loopback reads them in a later turn: an earlier answer without
    its own recall (which would otherwise hold the whole conversation again, and grow with
    each turn), anything else as it is."""
    if item.role == pb.ITEM_ROLE_ASSISTANT:
        return text.split(RECALL, 1)[0]
    return text


def item_tokens(item: pb.ConversationItem, text: str) -> int:
    """An item as :func:`input_tokens` counts a turn: its words ``text``, and for a user's item
    a token per 100 ms of its audio."""
    audio_ms = 0.0
    if item.role == pb.ITEM_ROLE_USER:
        audio_ms = sum(
            part.audio_duration_ms
            for part in item.content
            if part.type == pb.CONTENT_TYPE_INPUT_AUDIO
        )
    return int(audio_ms // 100) + len(text.split())


def tone(duration_ms: float) -> bytes:
    """A quiet 440 Hz tone in canonical output form."""
    rate_hz = CANONICAL_OUTPUT_RATE_HZ
    t = np.arange(int(rate_hz * duration_ms / 1000), dtype=np.float32) / rate_hz
    return audio.encode(0.1 * np.sin(2 * np.pi * 440.0 * t), pb.AUDIO_ENCODING_PCM16, rate_hz)


def _texts(inputs: list[UserInput]) -> list[str]:
    return [user.text for user in inputs if user.text]
