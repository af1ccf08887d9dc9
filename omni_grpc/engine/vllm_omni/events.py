"""vLLM-Omni's duplex events, read in their Realtime wire form, as our events.

vLLM-Omni renders every event it emits to the OpenAI Realtime wire object
(``event.to_realtime()``); that object is its public contract, so this translator reads it
rather than vLLM-Omni's classes. Most events have an equal here. The differences:

* Events about the assistant's item and its parts (``output_item.*``, ``content_part.*``,
  ``*.done`` of audio, transcript and text, and ``conversation.item.*`` of assistant items)
  carry nothing ``response_created`` and ``response_done`` do not; they are dropped.
  ``response_created`` waits for the response's item to be known (``output_item.added``),
  since ours names it.
* Audio deltas are stamped on the response's media clock, and converted to canonical
  output (pcm16, 24 kHz) if vLLM-Omni sent another rate.
* ``response_done`` gets the usage and latency vLLM-Omni does not report, measured here:
  audio sent, input audio committed, time from the turn's start to the first text and audio.
* ``response.listen`` is passed on without the response it names: vLLM-Omni's listen does
  not end that response (its ``response.done`` does), while ours would.
* Session-level events (``session.*``, heartbeats, rate limits, ``turn.event``,
  ``duplex.raw``) belong to vLLM-Omni's own transport, which our core replaces.
"""

from __future__ import annotations

import base64
import binascii
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass

from omni_grpc import audio
from omni_grpc.core.errors import CommandError
from omni_grpc.engine import kit
from omni_grpc.engine.vllm_omni.commands import conversation_item
from omni_grpc.wire import pb
from omni_grpc.wire.error_codes import known_code
from omni_grpc.wire.names import OVERLAP_ACTIONS, OVERLAP_POLICIES, RESPONSE_STATUSES
from omni_grpc.wire.pcm import CANONICAL_OUTPUT_RATE_HZ, pcm16_ms

TERMINAL = frozenset({"session.closed", "session.expired"})
# How a response.done says its response ended: "in_progress" is no end, so it is read as
# failed, like a status this side does not know.
_STATUSES = {
    name: status
    for name, status in RESPONSE_STATUSES.items()
    if status != pb.RESPONSE_STATUS_IN_PROGRESS
}
Wire = dict[str, object]


def _text(wire: Wire, key: str) -> str:
    value = wire.get(key)
    return value if isinstance(value, str) else ""


def _number(wire: object, key: str) -> float:
    value = wire.get(key) if isinstance(wire, dict) else None
    return float(value) if isinstance(value, int | float) else 0.0


def _dict(wire: object, key: str) -> Wire:
    value = wire.get(key) if isinstance(wire, dict) else None
    return value if isinstance(value, dict) else {}


@dataclass(slots=True)
class _Response:
    """What this side knows of a running response."""

    id: str
    started: float  # the turn's start on our clock: its commit, or the response's creation
    modalities: tuple[pb.Modality.ValueType, ...]
    input_audio_ms: float = 0.0
    announced: bool = False
    clock_ms: float = 0.0
    first_text: float | None = None
    first_audio: float | None = None


class EventTranslator:
    """Turns one session's vLLM-Omni events into ours; see the module docstring."""

    def __init__(self, client_command: Callable[[object], tuple[int, str]]) -> None:
        self._client_command = client_command
        self._responses: dict[str, _Response] = {}
        self._turn_started: float | None = None
        # Input audio, counted as the session sends it: not committed yet; committed and
        # waiting for vLLM-Omni to say so (one entry a commit); committed, not answered yet.
        self._uncommitted_ms = 0.0
        self._commits: collections.deque[float] = collections.deque(maxlen=64)
        self._unanswered_ms = 0.0

    def appended(self, duration_ms: float) -> None:
        """The session sent this much input audio."""
        self._uncommitted_ms += duration_ms

    def cleared(self) -> None:
        """The session dropped the uncommitted input."""
        self._uncommitted_ms = 0.0

    def committing(self) -> bool:
        """The session commits its input now (the turn starts); False if there is none."""
        self._turn_started = time.monotonic()
        if not self._uncommitted_ms:
            return False
        self._commits.append(self._uncommitted_ms)
        self._uncommitted_ms = 0.0
        return True

    def translate(self, wire: Wire) -> list[pb.ConverseResponse]:
        kind = _text(wire, "type")
        handler = _HANDLERS.get(kind)
        return handler(self, wire) if handler is not None else []

    # -- input ---------------------------------------------------------------------------

    def _speech_started(self, wire: Wire) -> list[pb.ConverseResponse]:
        body = pb.SpeechStarted(
            audio_start_ms=_number(wire, "audio_start_ms"), item_id=_text(wire, "item_id")
        )
        return [pb.ConverseResponse(speech_started=body)]

    def _speech_stopped(self, wire: Wire) -> list[pb.ConverseResponse]:
        body = pb.SpeechStopped(
            audio_end_ms=_number(wire, "audio_end_ms"), item_id=_text(wire, "item_id")
        )
        return [pb.ConverseResponse(speech_stopped=body)]

    def _committed(self, wire: Wire) -> list[pb.ConverseResponse]:
        duration_ms = self._commits.popleft() if self._commits else 0.0
        self._unanswered_ms += duration_ms
        body = pb.InputCommitted(
            item_id=_text(wire, "item_id"),
            previous_item_id=_text(wire, "previous_item_id"),
            audio_duration_ms=duration_ms,
        )
        return [pb.ConverseResponse(input_committed=body)]

    def _item(self, wire: Wire, field: str) -> list[pb.ConverseResponse]:
        item = conversation_item(wire.get("item"))
        if item.role != pb.ITEM_ROLE_USER:  # the assistant's item comes with response_done
            return []
        previous = _text(wire, "previous_item_id")
        if field == "item_added":
            return [
                pb.ConverseResponse(item_added=pb.ItemAdded(item=item, previous_item_id=previous))
            ]
        return [pb.ConverseResponse(item_done=pb.ItemDone(item=item, previous_item_id=previous))]

    def _transcribed(self, wire: Wire) -> list[pb.ConverseResponse]:
        body = pb.InputTranscription(
            item_id=_text(wire, "item_id"),
            content_index=int(_number(wire, "content_index")),
            transcript=_text(wire, "transcript"),
        )
        return [pb.ConverseResponse(input_transcription=body)]

    # -- responses -----------------------------------------------------------------------

    def _created(self, wire: Wire) -> list[pb.ConverseResponse]:
        response = _dict(wire, "response")
        response_id = _text(wire, "response_id") or _text(response, "id")
        names = response.get("modalities") or response.get("output_modalities") or ["audio"]
        speaks = isinstance(names, list) and "audio" in names
        self._responses[response_id] = _Response(
            id=response_id,
            started=self._turn_started or time.monotonic(),
            modalities=(pb.MODALITY_AUDIO,) if speaks else (pb.MODALITY_TEXT,),
            input_audio_ms=self._unanswered_ms,
        )
        self._turn_started, self._unanswered_ms = None, 0.0
        return []

    def _announce(self, response_id: str, item_id: str) -> list[pb.ConverseResponse]:
        state = self._responses.get(response_id)
        if state is None or state.announced:
            return []
        state.announced = True
        body = pb.Response(
            id=response_id,
            status=pb.RESPONSE_STATUS_IN_PROGRESS,
            output_modalities=state.modalities,
        )
        return [
            pb.ConverseResponse(response_created=pb.ResponseCreated(response=body, item_id=item_id))
        ]

    def _output_item(self, wire: Wire) -> list[pb.ConverseResponse]:
        item = conversation_item(wire.get("item"))
        return self._announce(_text(wire, "response_id"), item.id)

    def _speak(self, wire: Wire) -> list[pb.ConverseResponse]:
        ids = {"response_id": _text(wire, "response_id"), "item_id": _text(wire, "item_id")}
        return [
            *self._announce(ids["response_id"], ids["item_id"]),
            pb.ConverseResponse(response_speak=pb.ResponseSpeak(**ids)),
        ]

    def _listen(self, wire: Wire) -> list[pb.ConverseResponse]:
        # vLLM-Omni's listen names the response the model listened in without ending it:
        # the response goes on (vLLM-Omni feeds the model more units for it) or ends with
        # its own response.done, which follows. Ours names only a response the listen ends,
        # and a renderer closes that one; naming it here ended the response twice.
        metadata = _dict(_dict(wire, "response"), "metadata")
        return [
            pb.ConverseResponse(response_listen=pb.ResponseListen(reason=_text(metadata, "reason")))
        ]

    def _audio(self, wire: Wire) -> list[pb.ConverseResponse]:
        response_id, item_id = _text(wire, "response_id"), _text(wire, "item_id")
        state = self._responses.get(response_id)
        if state is None:
            return []
        if _text(wire, "format") not in ("pcm16", "pcm"):
            raise ValueError(f"vLLM-Omni sent {_text(wire, 'format')!r} audio; pcm16 was asked")
        try:
            pcm = base64.b64decode(_text(wire, "delta"), validate=True)
        except binascii.Error as error:
            raise ValueError("vLLM-Omni sent audio that is not base64") from error
        rate = int(_number(wire, "sample_rate_hz")) or CANONICAL_OUTPUT_RATE_HZ
        pcm = pcm[: len(pcm) - len(pcm) % 2]
        if rate != CANONICAL_OUTPUT_RATE_HZ:
            samples = audio.decode(pcm, pb.AUDIO_ENCODING_PCM16, rate)
            resampled = audio.resample(samples, rate, CANONICAL_OUTPUT_RATE_HZ)
            pcm = audio.encode(resampled, pb.AUDIO_ENCODING_PCM16, CANONICAL_OUTPUT_RATE_HZ)
        if not pcm:
            return []
        duration_ms = pcm16_ms(len(pcm), CANONICAL_OUTPUT_RATE_HZ)
        body = pb.OutputAudioDelta(
            audio=pcm,
            response_id=response_id,
            item_id=item_id,
            encoding=pb.AUDIO_ENCODING_PCM16,
            sample_rate_hz=CANONICAL_OUTPUT_RATE_HZ,
            start_ms=state.clock_ms,
            duration_ms=duration_ms,
        )
        state.clock_ms += duration_ms
        state.first_audio = state.first_audio or time.monotonic()
        return [*self._announce(response_id, item_id), pb.ConverseResponse(output_audio_delta=body)]

    def _words(self, wire: Wire, field: str) -> list[pb.ConverseResponse]:
        response_id, item_id = _text(wire, "response_id"), _text(wire, "item_id")
        state = self._responses.get(response_id)
        delta = _text(wire, "delta")
        if state is None or not delta:
            return []
        state.first_text = state.first_text or time.monotonic()
        ids = {"response_id": response_id, "item_id": item_id, "delta": delta}
        if field == "output_audio_transcript_delta":
            event = pb.ConverseResponse(
                output_audio_transcript_delta=pb.OutputAudioTranscriptDelta(**ids)
            )
        else:
            event = pb.ConverseResponse(output_text_delta=pb.OutputTextDelta(**ids))
        return [*self._announce(response_id, item_id), event]

    def _done(self, wire: Wire) -> list[pb.ConverseResponse]:
        response = _dict(wire, "response")
        response_id = _text(wire, "response_id") or _text(response, "id")
        listed = response.get("output")
        outputs = [conversation_item(item) for item in listed] if isinstance(listed, list) else []
        state = self._responses.pop(response_id, None)
        if state is None:  # its creation came before this translator (cannot happen)
            state = _Response(response_id, time.monotonic(), (pb.MODALITY_AUDIO,))
        events = self._announce_now(state, outputs[0].id if outputs else "")
        details = _dict(response, "status_details")
        body = pb.Response(
            id=response_id,
            status=_STATUSES.get(_text(response, "status"), pb.RESPONSE_STATUS_FAILED),
            status_reason=_text(details, "reason") or _text(details, "type"),
            output=outputs,
            output_modalities=state.modalities,
            usage=pb.Usage(
                input_audio_ms=state.input_audio_ms,
                output_audio_ms=state.clock_ms,
            ),
            latency=kit.turn_latency(
                state.started, state.first_text, state.first_audio, time.monotonic(), state.clock_ms
            ),
        )
        return [*events, pb.ConverseResponse(response_done=pb.ResponseDone(response=body))]

    def _announce_now(self, state: _Response, item_id: str) -> list[pb.ConverseResponse]:
        self._responses[state.id] = state
        events = self._announce(state.id, item_id)
        del self._responses[state.id]
        return events

    # -- the rest ------------------------------------------------------------------------

    def _cleared_output(self, wire: Wire) -> list[pb.ConverseResponse]:
        body = pb.OutputAudioCleared(response_id=_text(wire, "response_id"))
        return [pb.ConverseResponse(output_audio_cleared=body)]

    def _overlap(self, wire: Wire) -> list[pb.ConverseResponse]:
        body = pb.OverlapDecision(
            policy=OVERLAP_POLICIES.get(_text(wire, "policy"), pb.OVERLAP_POLICY_UNSPECIFIED),
            action=OVERLAP_ACTIONS.get(_text(wire, "action"), pb.OVERLAP_ACTION_UNSPECIFIED),
            reason=_text(wire, "reason"),
        )
        return [pb.ConverseResponse(overlap_decision=body)]

    def _acknowledged(self, wire: Wire) -> list[pb.ConverseResponse]:
        event = _dict(wire, "event")
        body = pb.PlaybackAcknowledged(
            response_id=_text(event, "response_id"),
            item_id=_text(event, "item_id"),
            played_ms=_number(event, "played_ms"),
            committed_ms=_number(event, "committed_ms"),
            truncate=bool(event.get("truncate")),
            history_committed=bool(event.get("history_committed")),
        )
        return [pb.ConverseResponse(playback_acknowledged=body)]

    def _retrieved(self, wire: Wire) -> list[pb.ConverseResponse]:
        item = conversation_item(wire.get("item"))
        return [pb.ConverseResponse(item_retrieved=pb.ItemRetrieved(item=item))]

    def _deleted(self, wire: Wire) -> list[pb.ConverseResponse]:
        return [pb.ConverseResponse(item_deleted=pb.ItemDeleted(item_id=_text(wire, "item_id")))]

    def _truncated(self, wire: Wire) -> list[pb.ConverseResponse]:
        body = pb.ItemTruncated(
            item_id=_text(wire, "item_id"),
            content_index=int(_number(wire, "content_index")),
            audio_end_ms=_number(wire, "audio_end_ms"),
        )
        return [pb.ConverseResponse(item_truncated=body)]

    def _error(self, wire: Wire) -> list[pb.ConverseResponse]:
        error = _dict(wire, "error")
        client_seq, event_id = self._client_command(error.get("event_id"))
        # The reference's codes are not ours: one outside the closed set becomes engine_error,
        # and the message keeps the original for whoever reads it.
        code = _text(error, "code")
        ours = known_code(code)
        message = _text(error, "message")
        refused = CommandError(
            ours,
            f"{code}: {message}" if code and code != ours else message,
            param=_text(error, "param"),
        )
        body = refused.to_error(client_seq=client_seq, event_id=event_id)
        return [pb.ConverseResponse(error=body)]


_HANDLERS: dict[str, Callable[[EventTranslator, Wire], list[pb.ConverseResponse]]] = {
    "input_audio_buffer.speech_started": EventTranslator._speech_started,
    "input_audio_buffer.speech_stopped": EventTranslator._speech_stopped,
    "input_audio_buffer.committed": EventTranslator._committed,
    "input_audio_buffer.cleared": lambda self, wire: [
        pb.ConverseResponse(input_cleared=pb.InputCleared())
    ],
    "conversation.item.added": lambda self, wire: self._item(wire, "item_added"),
    "conversation.item.done": lambda self, wire: self._item(wire, "item_done"),
    "conversation.item.retrieved": EventTranslator._retrieved,
    "conversation.item.deleted": EventTranslator._deleted,
    "conversation.item.truncated": EventTranslator._truncated,
    "conversation.item.input_audio_transcription.completed": EventTranslator._transcribed,
    "response.created": EventTranslator._created,
    "response.output_item.added": EventTranslator._output_item,
    "response.speak": EventTranslator._speak,
    "response.listen": EventTranslator._listen,
    "response.output_audio.delta": EventTranslator._audio,
    "response.output_audio_transcript.delta": lambda self, wire: self._words(
        wire, "output_audio_transcript_delta"
    ),
    "response.output_text.delta": lambda self, wire: self._words(wire, "output_text_delta"),
    "response.done": EventTranslator._done,
    "output_audio_buffer.cleared": EventTranslator._cleared_output,
    "overlap.decision": EventTranslator._overlap,
    "playback.acknowledged": EventTranslator._acknowledged,
    "error": EventTranslator._error,
}
