"""What a conversation was, turn by turn, and what two conversations' events have in common.

Both a recording and a replay become the same :class:`Step` list (a command sent or an event
received, with its time and its body as proto JSON), so one reading serves both:

* :func:`turns`: each response as a turn: what the user said or typed before it, what the
  assistant answered, how it ended (a cancel is a barge-in), its audio, and the time from the
  end of the user's input (a commit, a ``response.create``, a typed item, the end of speech the
  server heard) to its first audio;
* :func:`normalized`: an event as it should be the same in a replay against a deterministic
  engine: ids replaced by their order of appearance, times and latencies left out, audio by its
  length and digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# The moments a user's input ends; a response's latency counts from the last one before it.
INPUT_ENDS_COMMANDS = frozenset(
    {"commit_input_audio", "create_response", "create_conversation_item", "append_input_text"}
)
ID_KEYS = frozenset({"id", "item_id", "response_id", "previous_item_id", "call_id", "session_id"})
# Fields that tell when, not what (they differ between any two runs), whether the server
# records (a matter of the server's policy, not of the conversation), and how much of its rate
# limits a session had left as a response ended (which hangs on the client's pace).
TIME_KEYS = frozenset({"latency", "time_left", "retry_after", "recording", "rate_limits"})


@dataclass(frozen=True, slots=True)
class Step:
    """A command sent (``command``) or an event received (``event``; ``stream`` for seq 0)."""

    t: float
    type: str
    kind: str
    body: dict[str, Any]
    audio: dict[str, Any] = field(default_factory=dict)  # a delta's bytes and digest


@dataclass
class Turn:
    """One response and the input it answers."""

    index: int
    response_id: str
    said: str = ""  # the user's words: a transcript, or typed text
    input: str = ""  # "audio", "text", or "" (none seen)
    answer: str = ""
    status: str = ""
    reason: str = ""
    input_end_t: float | None = None
    first_audio_t: float | None = None
    audio_ms: float = 0.0

    @property
    def latency_ms(self) -> float | None:
        """From the end of the user's input to the first audio of the answer."""
        if self.input_end_t is None or self.first_audio_t is None:
            return None
        return (self.first_audio_t - self.input_end_t) * 1000

    @property
    def barge_in(self) -> bool:
        return self.status == "RESPONSE_STATUS_CANCELLED"

    def as_json(self) -> dict[str, Any]:
        latency = self.latency_ms
        return {
            "index": self.index,
            "input": self.input,
            "said": self.said,
            "answer": self.answer,
            "status": self.status.removeprefix("RESPONSE_STATUS_").lower(),
            "reason": self.reason,
            "audio_ms": round(self.audio_ms, 1),
            "input_end_to_first_audio_ms": None if latency is None else round(latency, 1),
            "barge_in": self.barge_in,
        }


def turns(steps: list[Step]) -> list[Turn]:
    """The turns of a conversation, in the order their responses began."""
    found: dict[str, Turn] = {}
    input_end: float | None = None
    said, said_by = "", ""
    heard: dict[str, str] = {}  # user item id -> its transcript
    committed = ""  # the user item the next response answers
    for step in steps:
        body, kind = step.body, step.kind
        if step.type == "command":
            if kind in INPUT_ENDS_COMMANDS:
                input_end = step.t
            if kind == "create_conversation_item":
                typed = _typed(body.get("item", {}))
                if typed:
                    said, said_by, committed = typed, "text", ""
            elif kind == "append_input_text":
                said, said_by, committed = body.get("text", ""), "text", ""
            continue
        if kind == "speech_stopped":
            input_end = step.t
        elif kind == "input_committed":
            committed, said, said_by = body.get("item_id", ""), "", "audio"
        elif kind == "input_transcription":
            heard[body.get("item_id", "")] = body.get("transcript", "")
        elif kind == "response_created":
            response = body.get("response", {})
            if response.get("conversation") == "RESPONSE_CONVERSATION_NONE":
                continue  # out of band: the client's question beside the turns, none of them
            rid = response.get("id", "")
            # An audio turn's words are its item's transcript, which may come later.
            words = said if said_by == "text" else committed
            found[rid] = Turn(len(found), rid, words, said_by, input_end_t=input_end)
        elif kind == "output_audio_delta":
            turn = found.get(body.get("response_id", ""))
            if turn is not None:
                turn.first_audio_t = turn.first_audio_t or step.t
                turn.audio_ms += float(body.get("duration_ms", 0.0))
        elif kind in ("output_audio_transcript_delta", "output_text_delta"):
            turn = found.get(body.get("response_id", ""))
            if turn is not None:
                turn.answer += body.get("delta", "")
        elif kind == "response_done":
            response = body.get("response", {})
            turn = found.get(response.get("id", ""))
            if turn is not None:
                turn.status = response.get("status", "")
                turn.reason = response.get("status_reason", "")
                turn.answer = _answer(response) or turn.answer
    for turn in found.values():  # an audio turn's words: its item's transcript, when heard
        if turn.input == "audio":
            turn.said = heard.get(turn.said, "")
    return list(found.values())


def _typed(item: dict[str, Any]) -> str:
    if item.get("role") != "ITEM_ROLE_USER":
        return ""
    return " ".join(part.get("text", "") for part in item.get("content", []) if part.get("text"))


def _answer(response: dict[str, Any]) -> str:
    words = []
    for item in response.get("output", []):
        for part in item.get("content", []):
            words.append(part.get("transcript") or part.get("text") or "")
    return "".join(words)


class Normalizer:
    """Turns events into comparable text: each id becomes its kind and order of appearance."""

    def __init__(self, on_new: Callable[[str, str], None] | None = None) -> None:
        self.ids: dict[str, str] = {}  # id -> its canonical name
        self._counts: dict[str, int] = {}
        self._on_new = on_new  # told (id, canonical name) of each new id

    def __call__(self, step: Step) -> str:
        body = self._walk(step.body)
        audio = {key: step.audio[key] for key in ("bytes", "blake2b") if key in step.audio}
        return f"{step.kind} {_sorted_json(body)} {_sorted_json(audio) if audio else ''}".strip()

    def canonical(self, value: str) -> str:
        if value not in self.ids:
            prefix = value.split("_", 1)[0] if "_" in value else "id"
            self._counts[prefix] = self._counts.get(prefix, 0) + 1
            self.ids[value] = f"<{prefix}#{self._counts[prefix]}>"
            if self._on_new is not None:
                self._on_new(value, self.ids[value])
        return self.ids[value]

    def _walk(self, node: Any, key: str = "") -> Any:
        if isinstance(node, dict):
            return {k: self._walk(v, k) for k, v in node.items() if k not in TIME_KEYS}
        if isinstance(node, list):
            return [self._walk(each, key) for each in node]
        if key in ID_KEYS and isinstance(node, str) and node:
            return self.canonical(node)
        return node


def normalized(steps: list[Step]) -> list[str]:
    """The numbered events of ``steps``, each as :class:`Normalizer` writes it."""
    normalize = Normalizer()
    return [normalize(step) for step in steps if step.type == "event"]


def digest(audio: bytes) -> str:
    """An audio payload's digest, as a recording writes it (``blake2b`` of 8 bytes)."""
    return hashlib.blake2b(audio, digest_size=8).hexdigest()


def _sorted_json(node: Any) -> str:
    return json.dumps(node, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


__all__ = ["Normalizer", "Step", "Turn", "digest", "normalized", "turns"]
