"""What the loopback says: the answer to a turn, its transcript, and how it ends."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np

from omni_grpc import audio
from omni_grpc.core.errors import CommandError
from omni_grpc.wire import pb

IN_RATE_HZ = audio.CANONICAL_INPUT_RATE_HZ
OUT_RATE_HZ = audio.CANONICAL_OUTPUT_RATE_HZ
_TONE_MS_PER_CHAR = 60.0
_TONE_MAX_MS = 5000.0

Modalities: TypeAlias = "tuple[pb.Modality.ValueType, ...]"


@dataclass(slots=True)
class PendingInput:
    """A committed user item that no response has answered yet."""

    item_id: str
    audio: bytes = b""  # canonical input
    text: str = ""


@dataclass(slots=True)
class Answer:
    """One response: what it will play and how much of it has gone out."""

    id: str
    item_id: str
    turn_started: float  # the commit or create_response, on the engine's monotonic clock
    modalities: Modalities
    input_audio_ms: float
    input_tokens: int
    output: bytes  # canonical output audio (pcm16, 24 kHz)
    transcript: str
    started: float = field(default_factory=time.monotonic)
    sent_ms: float = 0.0
    sent_text: str = ""
    marks: list[tuple[float, int]] = field(default_factory=list)  # (audio end ms, text chars)
    first_audio: float | None = None
    first_text: float | None = None
    played_ms: float = 0.0
    done: bool = False

    @property
    def speaks(self) -> bool:
        return pb.MODALITY_AUDIO in self.modalities

    def text_at(self, audio_ms: float) -> str:
        """The transcript that goes with the first ``audio_ms`` of the output."""
        chars = max((c for end, c in self.marks if end <= audio_ms + 1e-6), default=0)
        return self.sent_text[:chars]


def answer_for(
    inputs: list[PendingInput],
    *,
    response_id: str,
    item_id: str,
    modalities: Modalities,
    turn_started: float,
) -> Answer:
    """The loopback's answer: the turn's audio played back, or a tone for a text-only turn."""
    heard = b"".join(entry.audio for entry in inputs)
    texts = [entry.text for entry in inputs if entry.text]
    audio_ms = len(heard) / 2 * 1000 / IN_RATE_HZ
    if heard:
        samples = audio.decode(heard, pb.AUDIO_ENCODING_PCM16, IN_RATE_HZ)
        output = audio.encode(
            audio.resample(samples, IN_RATE_HZ, OUT_RATE_HZ), pb.AUDIO_ENCODING_PCM16, OUT_RATE_HZ
        )
    else:
        chars = max(len(" ".join(texts)), 1)
        output = tone(min(chars * _TONE_MS_PER_CHAR, _TONE_MAX_MS))
    return Answer(
        id=response_id,
        item_id=item_id,
        turn_started=turn_started,
        modalities=modalities,
        input_audio_ms=audio_ms,
        # A fixed rule, so that usage can be checked: a token per 100 ms of audio and per word.
        input_tokens=int(audio_ms // 100) + sum(len(t.split()) for t in texts),
        output=output,
        transcript=transcript(audio_ms, texts),
    )


def transcript(audio_ms: float, texts: list[str]) -> str:
    """The loopback's words for a turn: what it heard, said plainly."""
    said = [f"you said {audio_ms / 1000:.2f} seconds of audio"] if audio_ms else []
    wrote = [f'you wrote "{" ".join(texts)[:200]}"'] if texts else []
    return " and ".join(said + wrote) or "you sent an empty item"


def split_words(text: str, parts: int) -> list[str]:
    """Splits ``text`` into ``parts`` pieces at word boundaries; they join back to ``text``."""
    words = re.findall(r"\S+\s*", text)
    n = len(words)
    return ["".join(words[i * n // parts : (i + 1) * n // parts]) for i in range(parts)]


def tone(duration_ms: float) -> bytes:
    """A quiet 440 Hz tone in canonical output form."""
    t = np.arange(int(OUT_RATE_HZ * duration_ms / 1000), dtype=np.float32) / OUT_RATE_HZ
    return audio.encode(0.1 * np.sin(2 * np.pi * 440.0 * t), pb.AUDIO_ENCODING_PCM16, OUT_RATE_HZ)


def output_item(answer: Answer, status: pb.ResponseStatus.ValueType) -> pb.ConversationItem:
    """The assistant item of ``answer``, holding what went out."""
    if answer.speaks:
        part = pb.ContentPart(
            type=pb.CONTENT_TYPE_OUTPUT_AUDIO,
            transcript=answer.sent_text,
            audio_duration_ms=answer.sent_ms,
        )
    else:
        part = pb.ContentPart(type=pb.CONTENT_TYPE_OUTPUT_TEXT, text=answer.sent_text)
    completed = status == pb.RESPONSE_STATUS_COMPLETED
    return pb.ConversationItem(
        id=answer.item_id,
        role=pb.ITEM_ROLE_ASSISTANT,
        status=pb.ITEM_STATUS_COMPLETED if completed else pb.ITEM_STATUS_INCOMPLETE,
        content=[part],
    )


def done_event(
    answer: Answer,
    item: pb.ConversationItem,
    status: pb.ResponseStatus.ValueType,
    reason: str,
    now: float,
) -> pb.ConverseResponse:
    """The ``response_done`` of ``answer``, with usage and latency on the engine's clock."""

    def since_turn(moment: float | None) -> float:
        return (moment - answer.turn_started) * 1000 if moment is not None else 0.0

    total_ms = since_turn(now)
    response = pb.Response(
        id=answer.id,
        status=status,
        status_reason=reason,
        output=[item],
        output_modalities=answer.modalities,
        usage=pb.Usage(
            input_tokens=answer.input_tokens,
            output_tokens=len(answer.sent_text.split()),
            input_audio_ms=answer.input_audio_ms,
            output_audio_ms=answer.sent_ms,
        ),
        latency=pb.TurnLatency(
            first_text_ms=since_turn(answer.first_text),
            first_audio_ms=since_turn(answer.first_audio),
            total_ms=total_ms,
            real_time_factor=total_ms / answer.sent_ms if answer.sent_ms else 0.0,
        ),
    )
    return pb.ConverseResponse(response_done=pb.ResponseDone(response=response))


def find_answer(answers: list[Answer], ack: pb.AckPlayback) -> Answer:
    """The response an ack is about: the one named, else the newest (with the named item)."""
    if ack.response_id:
        named = [a for a in answers if a.id == ack.response_id]
    else:
        named = [a for a in answers if ack.item_id in ("", a.item_id)]
    if not named:
        raise CommandError(
            "playback_item_not_found", "no such response to acknowledge", param="response_id"
        )
    answer = named[-1]
    if ack.item_id and ack.item_id != answer.item_id:
        raise CommandError(
            "playback_item_mismatch",
            f"item {ack.item_id} is not the item of response {answer.id}",
            param="item_id",
        )
    return answer


def acknowledge(answer: Answer, ack: pb.AckPlayback, *, ack_only: bool) -> pb.PlaybackAcknowledged:
    """Records played audio of ``answer`` and says what entered history.

    Nobody can have played more than was sent, and played time never goes back. Under
    ``ack_only`` a finished item is in history once all of it was heard; otherwise once done.
    """
    answer.played_ms = min(max(answer.played_ms, ack.played_ms), answer.sent_ms)
    wanted = ack.committed_ms if ack.HasField("committed_ms") else ack.played_ms
    committed = min(wanted, answer.sent_ms)
    return pb.PlaybackAcknowledged(
        response_id=answer.id,
        item_id=answer.item_id,
        played_ms=answer.played_ms,
        committed_ms=committed,
        truncate=ack.truncate,
        history_committed=answer.done and (committed >= answer.sent_ms or not ack_only),
    )
