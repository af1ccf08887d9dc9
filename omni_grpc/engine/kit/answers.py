"""A response in flight (:class:`Answer`), the user input it answers, and what its end reports.

An answer keeps a ledger of what went out: the audio sent on the response's media clock, the
text sent, and marks that tie the two together, so a truncate or a playback ack can cut the
transcript where the audio was cut. The ledger counts only what was queued for the reader; a
cancel takes unread output back out of it (:meth:`Answer.take_back`).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeAlias

from omni_grpc.core.commands import AckPlayback
from omni_grpc.core.errors import CommandError
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, pcm16_ms

Modalities: TypeAlias = "tuple[pb.Modality.ValueType, ...]"
# How a response ended: its status and status_reason.
Outcome: TypeAlias = "tuple[pb.ResponseStatus.ValueType, str]"


def new_id(prefix: str) -> str:
    """A fresh id for an item (``item``) or a response (``resp``)."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


class Hold:
    """A reply's audio held while speech over it is judged (``resume_false_interruption``).

    The session pauses it at the speech's onset and releases it with the point of the media
    clock the audio goes on from; the speech player waits on it before each chunk. Whether a
    playback ack came in since the pause says where the listener stopped hearing the reply.
    """

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self.resume_at_ms: float | None = None
        self.acked = False  # an ack_playback came in since the pause

    @property
    def held(self) -> bool:
        return not self._open.is_set()

    def pause(self) -> None:
        self._open.clear()
        self.resume_at_ms, self.acked = None, False

    def release(self, resume_at_ms: float) -> None:
        self.resume_at_ms = resume_at_ms
        self._open.set()

    async def wait(self) -> float | None:
        """Waits until released; returns where to go on from, once (None: where it was)."""
        await self._open.wait()
        resume_at, self.resume_at_ms = self.resume_at_ms, None
        return resume_at


def _final() -> asyncio.Event:
    final = asyncio.Event()
    final.set()
    return final


@dataclass(slots=True)
class UserInput:
    """A committed user item that no response has answered yet."""

    item_id: str
    previous_item_id: str = ""
    audio: bytes = b""  # canonical input
    text: str = ""  # typed text, or the transcript once known
    call_output: bool = False  # a function_call_output item: ``text`` is what the function returned
    idle: bool = False  # the silence an idle prompt committed: the response checks in
    # Set once ``text`` is final; an engine that transcribes makes it unset and sets it later.
    text_final: asyncio.Event = field(default_factory=_final)

    @property
    def audio_ms(self) -> float:
        return pcm16_ms(len(self.audio), CANONICAL_INPUT_RATE_HZ)


@dataclass(slots=True)
class Answer:
    """One response in flight: what it answers, and the ledger of what has gone out."""

    id: str
    item_id: str
    turn_started: float  # the commit or create_response, on the engine's monotonic clock
    modalities: Modalities
    inputs: list[UserInput] = field(default_factory=list)
    instructions: str = ""
    voice: str = ""
    metadata: dict[str, str] = field(default_factory=dict)  # create_response's, returned as is
    tools: pb.ToolSet = field(default_factory=pb.ToolSet)  # what the response may call
    tool_choice: pb.ToolChoice = field(default_factory=pb.ToolChoice)
    parallel_tool_calls: bool = True  # False: the response makes at most one call
    calls: list[pb.ConversationItem] = field(default_factory=list)  # its function_call items
    # Out of band: its items join no history, and it is never the session's running response.
    out_of_band: bool = False
    # What it reads instead of the conversation (create_response's input): None, the
    # conversation; else these items, oldest first (a reference's is the history's own).
    context: list[pb.ConversationItem] | None = None
    max_output_tokens: int | None = None  # its own cap; None: the session's
    own_voice: bool = False  # ``voice`` is create_response's, not the session's
    by_server_vad: bool = False  # its turn was detected, not committed: noise may end it quietly
    announced: bool = False  # response_created went out
    input_tokens: int = 0
    read_tokens: int = 0  # the tokens of the conversation it read, after truncation
    output_tokens: int | None = None  # what the model wrote; None: the words that went out
    sent_ms: float = 0.0
    sent_text: str = ""
    marks: list[tuple[float, int]] = field(default_factory=list)  # (audio end ms, text chars)
    first_text: float | None = None
    first_audio: float | None = None
    played_ms: float = 0.0
    done: bool = False
    hold: Hold = field(default_factory=Hold)
    # Set by the speech player: plays whatever a release of the hold asks for once the
    # response has no more to say (the kit awaits it before the response is done).
    settle: Callable[[], Awaitable[None]] | None = None

    @property
    def conversation(self) -> pb.ResponseConversation.ValueType:
        """What its Response says of the conversation: NONE out of band, else unspecified."""
        return (
            pb.RESPONSE_CONVERSATION_NONE
            if self.out_of_band
            else pb.RESPONSE_CONVERSATION_UNSPECIFIED
        )

    @property
    def speaks(self) -> bool:
        return pb.MODALITY_AUDIO in self.modalities

    @property
    def input_audio_ms(self) -> float:
        return sum(user.audio_ms for user in self.inputs)

    def text_at(self, audio_ms: float) -> str:
        """The transcript that goes with the first ``audio_ms`` of the output."""
        chars = max((c for end, c in self.marks if end <= audio_ms + 1e-6), default=0)
        return self.sent_text[:chars]

    def take_back(self, unread: list[pb.ConverseResponse]) -> None:
        """Counts output the reader never took as unsent.

        It is the newest output, so its text is the end of ``sent_text``.
        """
        unsent_chars = 0
        for event in unread:
            if event.HasField("output_audio_delta"):
                self.sent_ms = min(self.sent_ms, event.output_audio_delta.start_ms)
            elif event.HasField("output_audio_transcript_delta"):
                unsent_chars += len(event.output_audio_transcript_delta.delta)
            elif event.HasField("output_text_delta"):
                unsent_chars += len(event.output_text_delta.delta)
        self.sent_text = self.sent_text[: len(self.sent_text) - unsent_chars]


def split_words(text: str, parts: int) -> list[str]:
    """Splits ``text`` into ``parts`` pieces at word boundaries; they join back to ``text``."""
    words = re.findall(r"\S+\s*", text)
    n = len(words)
    return ["".join(words[i * n // parts : (i + 1) * n // parts]) for i in range(parts)]


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


def turn_latency(
    turn_started: float,
    first_text: float | None,
    first_audio: float | None,
    now: float,
    audio_ms: float,
) -> pb.TurnLatency:
    """A response's latency, each moment measured from the start of its turn, on one clock."""

    def since_turn(moment: float | None) -> float:
        return (moment - turn_started) * 1000 if moment is not None else 0.0

    total_ms = since_turn(now)
    return pb.TurnLatency(
        first_text_ms=since_turn(first_text),
        first_audio_ms=since_turn(first_audio),
        total_ms=total_ms,
        real_time_factor=total_ms / audio_ms if audio_ms else 0.0,
    )


def done_event(
    answer: Answer,
    item: pb.ConversationItem,
    outcome: Outcome,
    now: float,
) -> pb.ConverseResponse:
    """The ``response_done`` of ``answer``, with usage and latency on the engine's clock."""

    status, reason = outcome
    output_tokens = answer.output_tokens
    response = pb.Response(
        id=answer.id,
        status=status,
        status_reason=reason,
        output=[item, *answer.calls],
        output_modalities=answer.modalities,
        metadata=answer.metadata,
        conversation=answer.conversation,
        max_output_tokens=answer.max_output_tokens,
        voice=answer.voice if answer.own_voice else "",
        usage=pb.Usage(
            input_tokens=answer.input_tokens,
            output_tokens=len(answer.sent_text.split()) if output_tokens is None else output_tokens,
            input_audio_ms=answer.input_audio_ms,
            output_audio_ms=answer.sent_ms,
        ),
        latency=turn_latency(
            answer.turn_started, answer.first_text, answer.first_audio, now, answer.sent_ms
        ),
    )
    return pb.ConverseResponse(response_done=pb.ResponseDone(response=response))


def find_answer(answers: list[Answer], ack: AckPlayback) -> Answer:
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


def acknowledge(answer: Answer, ack: AckPlayback, *, ack_only: bool) -> pb.PlaybackAcknowledged:
    """Records played audio of ``answer`` and says what entered history.

    Nobody can have played more than was sent, and played time never goes back. Under
    ``ack_only`` a finished item is in history once all of it was heard; otherwise once done.
    """
    answer.played_ms = min(max(answer.played_ms, ack.played_ms), answer.sent_ms)
    wanted = ack.played_ms if ack.committed_ms is None else ack.committed_ms
    committed = min(wanted, answer.sent_ms)
    return pb.PlaybackAcknowledged(
        response_id=answer.id,
        item_id=answer.item_id,
        played_ms=answer.played_ms,
        committed_ms=committed,
        truncate=ack.truncate,
        history_committed=answer.done and (committed >= answer.sent_ms or not ack_only),
    )
