"""Inbound, vLLM-Omni dialect: the client frames of vLLM-Omni's endpoint → Protobuf commands.

:class:`VllmOmniInbound` does for vLLM-Omni's endpoint what :mod:`bridge.realtime.inbound` does
for the OpenAI one, whose translation it reuses for everything the two share. What differs:

* **Rates.** ``pcm16`` (and any PCM format that names no rate) means 16 kHz, the reference's
  input default, and a session opens at pcm16 16 kHz unless it says otherwise; the session's
  ``sample_rate_hz`` or ``audio.input.sample_rate_hz`` names another. OpenAI's pcm16 is 24 kHz:
  a vLLM-Omni client's audio read that way would play 1.5 times too fast.
* **Model options.** ``extra_body`` and ``ref_audio`` travel as the engine options of those
  names: the vllm-omni engine hands them to vLLM-Omni, and other engines, which have no use
  for a vLLM-Omni model's options, know them by name and leave them be.
* **Overlap.** ``overlap_barge_in_ms`` is the contract's ``interruption.min_duration_ms``, one
  model of overlap for both dialects (:func:`_overlap_settings` says what has no match).
* **Commit.** A commit that does not say whether to answer leaves the contract's
  ``create_response`` unset, so turn detection (or the model, where it owns the turns) decides;
  the OpenAI dialect says ``false``, as OpenAI's commit never answers by itself.
* **Appends** carry ``video_frames``; **text** comes as ``push_text`` too; ``turn.signal``
  carries another event, which is translated as if it had come by itself.
* **Playback acks** may name the item ``item_<response_id>``, the reference's id of a
  response's item: the engine's own item of that response is meant.
* A malformed ``session.resume`` is ``invalid_session_resume``, on which the reference client
  stops retrying.
"""

from __future__ import annotations

import binascii
from typing import Any

import orjson

from bridge.errors import DialectError
from bridge.realtime import client_events as ce
from bridge.realtime.inbound import (
    decode_client_event,
    open_request,
    resume_request,
    to_request,
)
from bridge.vllm_omni import client_events as ve
from bridge.vllm_omni.numbering import covered
from bridge.vllm_omni.outbound import VllmOmniOutbound
from omni_grpc.wire import pb

# The reference's default input: pcm16 at 16 kHz.
DEFAULT_INPUT_RATE_HZ = 16000
_PCM = frozenset({pb.AUDIO_ENCODING_PCM16, pb.AUDIO_ENCODING_PCM_F32})
# The events a turn.signal may carry, as the reference re-dispatches them.
SIGNALLED_EVENTS = frozenset(
    {
        "input.cancel",
        "barge_in",
        "response.cancel",
        "session.update",
        "conversation.item.create",
        "conversation.item.delete",
        "conversation.item.truncate",
    }
)
# Refusals that end the connection when the first frame earns them, as the reference's
# handshake ends it: a frame that is not JSON, and a resume it cannot read. (A first frame
# that is not a JSON object ends it too: see NotAnObject.)
FIRST_FRAME_FATAL = frozenset({"invalid_json", "invalid_session_resume"})
# The magic numbers of the image types a video frame may have.
_IMAGE_TYPES = ((b"\xff\xd8\xff", "image/jpeg"), (b"\x89PNG\r\n\x1a\n", "image/png"))


class NotAnObject(DialectError):
    """A frame that is JSON but not an object: ``bad_event``, and the end of a handshake. A
    JSON object that is not a good event is ``bad_event`` too, but answered in band: the
    reference opens a session and refuses the event there; the bridge refuses it and waits
    for a first event it can apply."""


def decode_vllm_omni_event(frame: str | bytes) -> Any:
    """Parses one frame of vLLM-Omni's endpoint; raises DialectError."""
    try:
        return decode_client_event(
            frame, adapter=ve.VLLM_OMNI_CLIENT_EVENT, types=ve.VLLM_OMNI_EVENT_TYPES
        )
    except DialectError as error:
        if error.code == "bad_event" and not isinstance(_parsed(frame), dict):
            raise NotAnObject("bad_event", error.message, param=error.param) from None
        if error.code == "bad_event" and _type_of(frame) == "session.resume":
            raise DialectError(
                "invalid_session_resume",
                "session.resume requires session_id, resume_token and a non-negative "
                f"last_received_server_event_seq ({error.message})",
                param=error.param,
                event_id=error.event_id,
            ) from None
        raise


def _parsed(frame: str | bytes) -> object:
    try:
        return orjson.loads(frame)
    except orjson.JSONDecodeError:
        return None


def _type_of(frame: str | bytes) -> object:
    data = _parsed(frame)
    return data.get("type") if isinstance(data, dict) else None


def _input_format(config: pb.SessionConfig, extras: ve.SessionExtras, *, opening: bool) -> None:
    """Gives PCM input the reference's rates: the session's rate, else 16 kHz."""
    audio_in = extras.audio.input if extras.audio else None
    rate = extras.sample_rate_hz or (audio_in.sample_rate_hz if audio_in else None)
    fmt = config.input_audio_format
    named = config.HasField("input_audio_format")
    if not named and (opening or rate):
        fmt.encoding = pb.AUDIO_ENCODING_PCM16
    if fmt.encoding in _PCM and not fmt.sample_rate_hz:
        fmt.sample_rate_hz = rate or DEFAULT_INPUT_RATE_HZ
    audio_out = extras.audio.output if extras.audio else None
    if audio_out is not None and audio_out.sample_rate_hz:
        out = config.output_audio_format
        if not config.HasField("output_audio_format"):
            out.encoding = pb.AUDIO_ENCODING_PCM16
        out.sample_rate_hz = audio_out.sample_rate_hz


def _model_options(config: pb.SessionConfig, extras: ve.SessionExtras) -> None:
    """``extra_body`` and ``ref_audio`` become the engine options of those names (kept
    whole, not merged, so that an engine tells vLLM-Omni's options from its own)."""
    if extras.extra_body:
        config.engine_options.update({"extra_body": extras.extra_body})
    if extras.ref_audio is not None:
        config.engine_options.update({"ref_audio": extras.ref_audio})


def _overlap_settings(config: pb.SessionConfig, extras: ve.SessionExtras) -> None:
    """The reference's overlap settings on the contract's one model of interruption.

    ``overlap_barge_in_ms`` (overlap speech that long cuts the reply) is ``min_duration_ms``,
    by any speech unless the session names a mode. Its others have no contract setting:
    ``overlap_short_ack_ms`` marks speech that short as an acknowledgement, where the contract
    drops all speech shorter than ``min_duration_ms`` alike, and ``overlap_silence_rms`` is an
    energy gate, where the contract's ``threshold`` is a voice activity probability. They are
    read and not used, as before.
    """
    if extras.overlap_barge_in_ms is None:
        return
    rules = config.interruption
    rules.min_duration_ms = extras.overlap_barge_in_ms
    if rules.mode == pb.INTERRUPTION_MODE_UNSPECIFIED:
        rules.mode = pb.INTERRUPTION_MODE_SPEECH


def apply_session_extras(
    config: pb.SessionConfig, extras: ve.SessionExtras, *, opening: bool
) -> None:
    """Lays the vLLM-Omni fields of a ``session`` over what the OpenAI dialect read."""
    _input_format(config, extras, opening=opening)
    _model_options(config, extras)
    _overlap_settings(config, extras)


def _video_frame(text: str, index: int) -> pb.VideoFrame:
    param = f"video_frames.{index}"
    if text.startswith("data:"):
        text = text.partition(";base64,")[2]
    try:
        data = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        raise DialectError("invalid_video_frames", "a frame is not base64", param=param) from None
    for magic, mime_type in _IMAGE_TYPES:
        if data.startswith(magic):
            return pb.VideoFrame(data=data, mime_type=mime_type)
    raise DialectError("invalid_video_frames", "frames must be JPEG or PNG", param=param)


def _append(event: ve.VllmOmniAppend, request: pb.ConverseRequest) -> None:
    frames = event.video_frames or []
    if len(frames) > ve.MAX_VIDEO_FRAMES:
        raise DialectError(
            "invalid_video_frames",
            f"at most {ve.MAX_VIDEO_FRAMES} frames per append",
            param="video_frames",
        )
    append = request.append_input_audio
    append.video_frames.extend(_video_frame(text, i) for i, text in enumerate(frames))
    if hints := event.hints():
        append.hints.update(hints)


def _playback_ack(request: pb.ConverseRequest, known_item: bool) -> None:
    ack = request.ack_playback
    named = ack.item_id.removeprefix("item_") if ack.item_id.startswith("item_") else ""
    if named and not known_item and ack.response_id in ("", named):
        # Not an item the engine named, but the reference's name for the item of response
        # `named`.
        ack.response_id, ack.item_id = named, ""


class VllmOmniInbound:
    """The inbound translation of vLLM-Omni's endpoint (the relay's view of a dialect). With the
    connection's ``outbound`` side, it tells that side how the session opened, and asks it
    which item ids the engine named."""

    def __init__(self, outbound: VllmOmniOutbound | None = None) -> None:
        self._outbound = outbound

    def decode(self, frame: str | bytes) -> Any:
        """Parses one frame; raises DialectError."""
        return decode_vllm_omni_event(frame)

    def request(self, frame: str | bytes) -> pb.ConverseRequest:
        """One frame's unnumbered command; raises DialectError."""
        return self.to_request(self.decode(frame))

    def ends_handshake(self, error: DialectError) -> bool:
        """Whether a refused first frame ends the connection, as the reference's does."""
        return error.code in FIRST_FRAME_FATAL or isinstance(error, NotAnObject)

    def open_request(self, event: ce.SessionUpdate | None, *, model: str) -> pb.ConverseRequest:
        """The ``open_session`` of a connection; a bare one opens at the reference's input."""
        if self._outbound is not None:
            self._outbound.opened_by_update = event is not None
        patch = event.session if event is not None else None
        request = open_request(patch, model=model)
        extras = event.extras if isinstance(event, ve.VllmOmniSessionUpdate) else ve.SessionExtras()
        apply_session_extras(request.open_session.config, extras, opening=True)
        return request

    def resume_request(self, event: ce.SessionResume) -> pb.ConverseRequest:
        """The ``resume_session`` of a connection whose first event resumes, from the contract
        event the client saw whole (bridge.vllm_omni.numbering)."""
        request = resume_request(event)
        request.resume_session.last_received_seq = covered(event.last_received_server_event_seq)
        return request

    def to_request(self, event: Any) -> pb.ConverseRequest:
        """Translates one event into its unnumbered command; raises DialectError."""
        try:
            request = self._translate(event)
        except DialectError as error:
            error.event_id = error.event_id or event.event_id
            raise
        request.event_id = event.event_id
        return request

    def _translate(self, event: Any) -> pb.ConverseRequest:
        if isinstance(event, ve.PushText):
            return pb.ConverseRequest(append_input_text=pb.AppendInputText(text=event.text))
        if isinstance(event, ve.TurnSignal):
            return self._signal(event)
        if isinstance(event, ce.SessionEventAck):
            # Up to the contract event the client saw whole (bridge.vllm_omni.numbering).
            seen = covered(event.server_event_seq)
            return pb.ConverseRequest(ack_events=pb.AckEvents(seq=seen))
        request = to_request(event)
        if isinstance(event, ve.VllmOmniSessionUpdate):
            apply_session_extras(request.update_session.config, event.extras, opening=False)
        elif isinstance(event, ve.VllmOmniAppend):
            _append(event, request)
        elif isinstance(event, ve.VllmOmniCommit) and event.create_response is None:
            if event.type == "input_audio_buffer.commit":
                request.commit_input_audio.ClearField("create_response")
        elif isinstance(event, ce.PlaybackAck):
            outbound = self._outbound
            _playback_ack(request, outbound is not None and outbound.knows_item(event.item_id))
        return request

    def _signal(self, event: ve.TurnSignal) -> pb.ConverseRequest:
        if event.event not in SIGNALLED_EVENTS:
            raise DialectError(
                "unknown_event",
                f"turn.signal carries one of {', '.join(sorted(SIGNALLED_EVENTS))}",
                param="event",
            )
        inner = {**event.payload, "type": event.event, "event_id": event.event_id}
        return self._translate(self.decode(orjson.dumps(inner)))
