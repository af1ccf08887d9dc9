"""Outbound: contract events → Realtime server events, for one websocket.

The contract is compact: a response is ``response_created``, deltas, ``response_done``. Stock
clients expect OpenAI's full sequence, so :class:`RealtimeOutbound` expands::

    response_created → response.created, conversation.item.added,
                       response.output_item.added, response.content_part.added
    deltas           → response.output_audio.delta (split to stay far below 1 MiB),
                       response.output_audio_transcript.delta, response.output_text.delta
    response_done    → response.output_audio.done, response.output_audio_transcript.done
                       (or response.output_text.done), response.content_part.done,
                       response.output_item.done, conversation.item.done, response.done

An out-of-band response (``Response.conversation`` NONE) is rendered without its
``conversation.item.*`` events, as OpenAI's are: its items join no conversation.

**Numbering.** Every Realtime event that comes from journaled event ``seq`` gets the event id
``event_<session tag>_<seq>_<k>``, so a replay after a resume carries the very same ids, and
the *last* event of the group carries ``server_event_seq``: a client that resumes after the
last ``server_event_seq`` it saw misses nothing, and if it saw part of a group it gets that
group again with ids it can drop. Events outside the journal get random ids and no seq.

**State.** An expansion depends on its event alone wherever the contract allows, so a bridge
that never saw the start of a response (a resume through a fresh bridge) still renders its
rest. The little state kept (which responses are open, their text so far, how long committed
input was) is bounded and only fills in what an event does not carry itself.
"""

from __future__ import annotations

import binascii
import collections
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bridge.options import MAX_AUDIO_DELTA_BYTES
from bridge.realtime.plain import plain
from bridge.realtime.server_events import (
    STATELESS,
    Event,
    item_json,
    logprobs_json,
    random_event_id,
    rate_limits_now,
    response_json,
)
from bridge.realtime.session_json import capabilities_json, session_json
from bridge.realtime.tools import (
    CALL_ITEM_TYPES,
    arguments_delta,
    arguments_done,
    call_item_events,
    call_item_json,
)
from omni_grpc.wire import pb

_OPEN_RESPONSES_KEPT = 16
_INPUT_ITEMS_KEPT = 64
# Events a group sends after the one that carries its seq: OpenAI follows response.done with
# rate_limits.updated. A client that stops reading at response.done has seen the response
# whole, so its cursor covers it (a resume does not replay a response for an update of limits,
# which the next response brings anew).
AFTER_THE_NUMBER = frozenset({"rate_limits.updated"})


@dataclass(slots=True)
class _Response:
    """What an open response's later events need and their own fields do not carry."""

    item_id: str
    audio: bool
    previous_item_id: str = ""  # the conversation item the response's message follows
    out_of_band: bool = False  # its items join no conversation: no conversation.item.* events
    transcript: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)


class RealtimeOutbound:
    """Expands the contract events of one session's stream into Realtime events."""

    def __init__(
        self, *, max_audio_delta_bytes: int = MAX_AUDIO_DELTA_BYTES, extensions: bool = False
    ) -> None:
        self.session_id = ""
        # Whether the client asked for the duplex extensions; without them it gets OpenAI's
        # GA events and fields only (bridge.realtime.plain).
        self.extensions = extensions
        self._tag = ""
        # Whole samples of every encoding (at most 4 bytes each) in every split delta.
        self._max_audio = max(4, max_audio_delta_bytes - max_audio_delta_bytes % 4)
        self._open: collections.OrderedDict[str, _Response] = collections.OrderedDict()
        self._announced: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._input_ms: collections.OrderedDict[str, float] = collections.OrderedDict()
        # The newest item of the conversation: the one a response's message item follows.
        self._last_item = ""
        self._handlers: dict[str, Callable[[Any], list[Event]]] = {
            **STATELESS,
            "session_created": self._session_created,
            "session_resumed": self._session_resumed,
            "input_committed": self._input_committed,
            "input_transcription": self._input_transcription,
            "item_added": lambda e: self._item("conversation.item.added", e),
            "item_done": lambda e: self._item("conversation.item.done", e),
            "response_created": self._response_created,
            "output_audio_delta": self._audio_delta,
            "output_audio_transcript_delta": self._transcript_delta,
            "output_text_delta": self._text_delta,
            "response_done": self._response_ended,
            "response_listen": self._response_listen,
            "function_call_arguments_delta": arguments_delta,
            "function_call_arguments_done": arguments_done,
        }

    def expand(self, event: pb.ConverseResponse) -> list[Event]:
        """Returns the Realtime events for one contract event, ids and seq stamped."""
        kind = event.WhichOneof("event")
        handler = self._handlers.get(kind or "")
        if handler is None:
            return []  # an event newer than this bridge: nothing it could render
        out = handler(getattr(event, kind or ""))
        if event.seq and out:
            prefix = f"event_{self._tag}_{event.seq}_"
            for index, item in enumerate(out):
                item["event_id"] = f"{prefix}{index}"
            after = len(out) > 1 and out[-1]["type"] in AFTER_THE_NUMBER
            out[-2 if after else -1]["server_event_seq"] = event.seq
        else:
            for item in out:
                item["event_id"] = random_event_id()
        return self.shown(out)

    def shown(self, events: list[Event]) -> list[Event]:
        """The events as this client gets them: without the extensions unless it asked."""
        if self.extensions:
            return events
        return [event for event in map(plain, events) if event is not None]

    # -- session -------------------------------------------------------------------------

    def _bind(self, session_id: str) -> None:
        self.session_id = session_id
        self._tag = hashlib.blake2b(session_id.encode(), digest_size=6).hexdigest()

    def _session_created(self, e: pb.SessionCreated) -> list[Event]:
        self._bind(e.session.id)
        return [
            {
                "type": "session.created",
                "session": session_json(e.session),
                "resume_token": e.resume_token,
                "attachment_generation": e.attachment_generation,
                "capabilities": capabilities_json(e.capabilities),
            }
        ]

    def _session_resumed(self, e: pb.SessionResumed) -> list[Event]:
        self._bind(e.session.id)
        return [
            {
                "type": "session.resumed",
                "session_id": e.session.id,
                "session": session_json(e.session),
                "resume_token": e.resume_token,
                "attachment_generation": e.attachment_generation,
                "replayed_events": e.replayed_events,
            }
        ]

    # -- input ---------------------------------------------------------------------------

    def _input_committed(self, e: pb.InputCommitted) -> list[Event]:
        self._last_item = e.item_id
        self._input_ms[e.item_id] = e.audio_duration_ms
        if len(self._input_ms) > _INPUT_ITEMS_KEPT:
            self._input_ms.popitem(last=False)
        return [
            {
                "type": "input_audio_buffer.committed",
                "item_id": e.item_id,
                "previous_item_id": e.previous_item_id or None,
            }
        ]

    def _input_transcription(self, e: pb.InputTranscription) -> list[Event]:
        seconds = self._input_ms.get(e.item_id, 0.0) / 1000
        return [
            {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": e.item_id,
                "content_index": e.content_index,
                "transcript": e.transcript,
                "usage": {"type": "duration", "seconds": seconds},
                **logprobs_json(e.logprobs),
            }
        ]

    def _item(self, kind: str, e: pb.ItemAdded | pb.ItemDone) -> list[Event]:
        state = self._open.get(e.response_id) if e.response_id else None
        if state is not None and state.out_of_band:  # a call of an out-of-band response
            return call_item_events(kind.rsplit(".", 1)[1], e)[:1]
        if kind == "conversation.item.added":
            self._last_item = e.item.id
        if e.response_id and e.item.type in CALL_ITEM_TYPES:  # a response's function call
            return call_item_events(kind.rsplit(".", 1)[1], e)
        if e.item.id in self._announced:
            return []  # the response expansion already announced this assistant item
        return [
            {
                "type": kind,
                "item": item_json(e.item),
                "previous_item_id": e.previous_item_id or None,
            }
        ]

    # -- responses -----------------------------------------------------------------------

    def _state(self, response: pb.Response, item_id: str) -> _Response:
        state = self._open.get(response.id)
        if state is None:
            modalities = set(response.output_modalities) or {pb.MODALITY_AUDIO}
            state = _Response(
                item_id=item_id,
                audio=pb.MODALITY_AUDIO in modalities,
                out_of_band=response.conversation == pb.RESPONSE_CONVERSATION_NONE,
            )
        return state

    def _response_created(self, e: pb.ResponseCreated) -> list[Event]:
        response, item_id = e.response, e.item_id
        state = self._state(response, item_id)
        if not state.out_of_band:  # an out-of-band item joins no conversation, moves no order
            if response.id not in self._open and self._last_item != item_id:
                state.previous_item_id = self._last_item
            self._last_item = item_id
        self._open[response.id] = state
        self._announced[item_id] = None
        for book in (self._open, self._announced):
            if len(book) > _OPEN_RESPONSES_KEPT:
                book.popitem(last=False)
        rid = response.id
        item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        part = {"type": "audio", "transcript": ""} if state.audio else {"type": "text", "text": ""}
        added: list[Event] = [
            {
                "type": "conversation.item.added",
                "item": item,
                "previous_item_id": state.previous_item_id or None,
            }
        ]
        return [
            {"type": "response.created", "response": response_json(response, [])},
            *([] if state.out_of_band else added),
            {
                "type": "response.output_item.added",
                "response_id": rid,
                "output_index": 0,
                "item": item,
            },
            {
                "type": "response.content_part.added",
                "response_id": rid,
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
                "part": part,
            },
        ]

    def _audio_delta(self, e: pb.OutputAudioDelta) -> list[Event]:
        audio, step = e.audio, self._max_audio
        ms_per_byte = e.duration_ms / len(audio) if audio else 0.0
        out = []
        for start in range(0, max(len(audio), 1), step):
            chunk = audio[start : start + step]
            out.append(
                {
                    "type": "response.output_audio.delta",
                    "response_id": e.response_id,
                    "item_id": e.item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": binascii.b2a_base64(chunk, newline=False).decode("ascii"),
                    "start_ms": e.start_ms + start * ms_per_byte,
                    "duration_ms": len(chunk) * ms_per_byte,
                }
            )
        return out

    def _transcript_delta(self, e: pb.OutputAudioTranscriptDelta) -> list[Event]:
        state = self._open.get(e.response_id)
        if state is not None:
            state.transcript.append(e.delta)
        return [
            {
                "type": "response.output_audio_transcript.delta",
                "response_id": e.response_id,
                "item_id": e.item_id,
                "output_index": 0,
                "content_index": 0,
                "delta": e.delta,
            }
        ]

    def _text_delta(self, e: pb.OutputTextDelta) -> list[Event]:
        state = self._open.get(e.response_id)
        if state is not None:
            state.text.append(e.delta)
        # A response with audio carries its text in the transcript; text sits after it.
        index = 1 if state is not None and state.audio else 0
        return [
            {
                "type": "response.output_text.delta",
                "response_id": e.response_id,
                "item_id": e.item_id,
                "output_index": 0,
                "content_index": index,
                "delta": e.delta,
            }
        ]

    def _response_listen(self, e: pb.ResponseListen) -> list[Event]:
        out: list[Event] = [
            {"type": "response.listen", "response_id": e.response_id or None, "reason": e.reason}
        ]
        if e.response_id in self._open:
            # The listen ends a response that was announced: close it as OpenAI clients expect,
            # its limits after it as after any response.done.
            out.extend(
                self._response_done(
                    pb.Response(
                        id=e.response_id,
                        status=pb.RESPONSE_STATUS_COMPLETED,
                        status_reason="model_listen",
                    )
                )
            )
            out.append(rate_limits_now(e.rate_limits))
        return out

    def _final_item(self, response: pb.Response, state: _Response) -> Event:
        for item in response.output:
            if item.role == pb.ITEM_ROLE_ASSISTANT and item.type not in CALL_ITEM_TYPES:
                return item_json(item)
        finished = response.status in (pb.RESPONSE_STATUS_COMPLETED, pb.RESPONSE_STATUS_UNSPECIFIED)
        status = "completed" if finished else "incomplete"
        content: list[Event] = []
        if state.audio:
            content.append({"type": "output_audio", "transcript": "".join(state.transcript)})
        if state.text or not state.audio:
            content.append({"type": "output_text", "text": "".join(state.text)})
        return {
            "id": state.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    def _response_ended(self, e: pb.ResponseDone) -> list[Event]:
        """A response's done events, then ``rate_limits.updated`` with the limits the service
        read as it ended, as OpenAI follows every ``response.done``."""
        return [*self._response_done(e.response), rate_limits_now(e.rate_limits)]

    def _response_done(self, response: pb.Response) -> list[Event]:
        first_item_id = response.output[0].id if response.output else ""
        state = self._open.pop(response.id, None) or self._state(response, first_item_id)
        item = self._final_item(response, state)
        rid, item_id = response.id, item["id"]
        ids = {"response_id": rid, "item_id": item_id, "output_index": 0}
        out: list[Event] = []
        for index, part in enumerate(item["content"]):
            if part["type"] == "output_audio":
                out.append({"type": "response.output_audio.done", **ids, "content_index": index})
                out.append(
                    {
                        "type": "response.output_audio_transcript.done",
                        **ids,
                        "content_index": index,
                        "transcript": part["transcript"],
                    }
                )
                done_part = {"type": "audio", "transcript": part["transcript"]}
            else:
                out.append(
                    {
                        "type": "response.output_text.done",
                        **ids,
                        "content_index": index,
                        "text": part["text"],
                    }
                )
                done_part = {"type": "text", "text": part["text"]}
            out.append(
                {
                    "type": "response.content_part.done",
                    **ids,
                    "content_index": index,
                    "part": done_part,
                }
            )
        out.append(
            {
                "type": "response.output_item.done",
                "response_id": rid,
                "output_index": 0,
                "item": item,
            }
        )
        if not state.out_of_band:
            out.append(
                {
                    "type": "conversation.item.done",
                    "item": item,
                    "previous_item_id": state.previous_item_id or None,
                }
            )
        calls = [call_item_json(i) for i in response.output if i.type in CALL_ITEM_TYPES]
        done = response_json(response, [item, *calls])
        out.append({"type": "response.done", "response": done})
        return out
