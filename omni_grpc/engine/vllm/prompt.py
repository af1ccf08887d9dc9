"""From a conversation to a chat prompt with audio: what the model sees for one response.

The model hears the user: user audio items go in as audio, each marked in the text by the
model's placeholder, not as transcripts. Only the latest ``audio_turns`` audio items are
kept (audio costs many prompt tokens, about 25 per second for Whisper-style encoders); older
ones leave the prompt, and each kept one is cut to its last ``max_audio_s`` seconds. Text
items and the assistant's earlier answers go in as text. Consecutive messages of one role
are merged, since many chat templates insist that roles alternate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from omni_grpc import audio
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ


@dataclass(frozen=True, slots=True)
class Entry:
    """One conversation item as the prompt sees it."""

    role: str  # "user" or "assistant"
    text: str = ""
    pcm16: bytes = b""  # canonical input audio of a user item


@dataclass(frozen=True, slots=True)
class Prompt:
    """The chat messages (OpenAI-style role/content pairs) and the audio they refer to."""

    messages: list[dict[str, str]]
    audio: list[np.ndarray]  # float32 canonical input, in placeholder order

    @property
    def audio_ms(self) -> float:
        return sum(len(clip) for clip in self.audio) * 1000 / CANONICAL_INPUT_RATE_HZ


def build_prompt(
    instructions: str,
    entries: Sequence[Entry],
    *,
    placeholder: Callable[[int], str],
    audio_turns: int,
    max_audio_s: float,
) -> Prompt:
    """The prompt for ``entries`` (oldest first); see the module docstring for the rules."""
    with_audio = [i for i, entry in enumerate(entries) if entry.pcm16]
    heard = set(with_audio[-audio_turns:])
    max_samples = int(max_audio_s * CANONICAL_INPUT_RATE_HZ)
    messages: list[dict[str, str]] = []
    clips: list[np.ndarray] = []
    if instructions.strip():
        messages.append({"role": "system", "content": instructions.strip()})
    for index, entry in enumerate(entries):
        parts = []
        if index in heard:
            samples = audio.decode(entry.pcm16, pb.AUDIO_ENCODING_PCM16, CANONICAL_INPUT_RATE_HZ)
            clips.append(np.ascontiguousarray(samples[-max_samples:], dtype=np.float32))
            parts.append(placeholder(len(clips)))
        if entry.text.strip():
            parts.append(entry.text.strip())
        if not parts:
            continue  # audio that left the prompt, with no words to stand in for it
        content = "\n".join(parts)
        if messages and messages[-1]["role"] == entry.role:
            messages[-1]["content"] += "\n" + content
        else:
            messages.append({"role": entry.role, "content": content})
    return Prompt(messages, clips)
