"""Inbound, vLLM-Omni dialect: the client events of vLLM-Omni's endpoint, as pydantic models.

The vLLM-Omni endpoint (``/v1/duplex``, or ``/v1/realtime?duplex=1``: the reference's own wire
names) speaks the dialect of vLLM-Omni's own serving, so that its clients work unchanged. Its
events are those of :mod:`bridge.realtime.client_events` plus what vLLM-Omni's clients send
beyond OpenAI's:

* ``session.update`` with the session's input rate (``sample_rate_hz``,
  ``audio.input.sample_rate_hz``), the output rate (``audio.output.sample_rate_hz``),
  ``ref_audio`` (the voice to speak with) and ``extra_body`` (model options);
* appends with ``video_frames`` and speech hints (``is_speech``, ``vad``, ``transcript``,
  ``overlap_action``, ``force_listen`` …);
* commits with ``final`` and ``is_speech``;
* ``push_text`` (the reference's alias of ``input.text.append``) and ``turn.signal`` /
  ``signal_turn``, which carries another event inside (``event`` and its ``payload``).

Each model here is a subclass of its OpenAI-dialect model, so
:func:`bridge.realtime.inbound.to_request` translates its common part and
:mod:`bridge.vllm_omni.inbound` adds the rest.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import AliasChoices, Field, TypeAdapter, model_validator

from bridge.realtime import client_events as ce
from bridge.realtime.client_events import (
    ClientModel,
    Finite,
    FreeFormObject,
    PositiveUInt32,
    UInt32,
)

# The reference's cap on frames per append and on one frame's base64 text.
MAX_VIDEO_FRAMES = 2
MAX_VIDEO_FRAME_CHARS = 4_000_000


class _RateJson(ClientModel):
    """An ``audio.input`` or ``audio.output`` block, read for its ``sample_rate_hz`` only."""

    sample_rate_hz: PositiveUInt32 | None = None


class _AudioRatesJson(ClientModel):
    input: _RateJson | None = None
    output: _RateJson | None = None


class SessionExtras(ClientModel):
    """What a vLLM-Omni ``session`` says beyond the OpenAI dialect's fields."""

    sample_rate_hz: PositiveUInt32 | None = None
    audio: _AudioRatesJson | None = None
    ref_audio: str | None = None
    extra_body: FreeFormObject | None = None
    # How long speech over a reply must last to cut it: the contract's
    # interruption.min_duration_ms (bridge.vllm_omni.inbound).
    overlap_barge_in_ms: UInt32 | None = None


class VllmOmniSessionUpdate(ce.SessionUpdate):
    """``session.update``; ``extras`` holds the session's vLLM-Omni fields."""

    extras: SessionExtras = SessionExtras()

    @model_validator(mode="before")
    @classmethod
    def _read_extras(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "session" not in data:
            # The reference also takes the session's fields beside `type`, with no `session`.
            flat = {key: value for key, value in data.items() if key not in ("type", "event_id")}
            data = {"type": data.get("type"), "event_id": data.get("event_id", ""), "session": flat}
        # The extras sit inside `session`, beside the fields SessionPatch reads.
        if isinstance(data.get("session"), dict):
            return {**data, "extras": data["session"]}
        return data


class VadHint(ClientModel):
    """The client's own voice activity verdict on a chunk."""

    is_speech: bool | None = None
    speech_probability: Finite | None = Field(
        default=None, validation_alias=AliasChoices("speech_probability", "probability")
    )
    silence_rms: Finite | None = None


class VllmOmniAppend(ce.InputAudioAppend):
    """An append with camera frames (bare base64 JPEG or PNG) and speech hints."""

    format: ce.FormatSpec | None = Field(
        default=None, validation_alias=AliasChoices("format", "input_audio_format")
    )

    video_frames: list[Annotated[str, Field(max_length=MAX_VIDEO_FRAME_CHARS)]] | None = None
    is_speech: bool | None = Field(
        default=None, validation_alias=AliasChoices("is_speech", "speech")
    )
    speech_probability: Finite | None = None
    vad: VadHint | None = None
    duration_ms: Finite | None = Field(
        default=None, validation_alias=AliasChoices("duration_ms", "audio_duration_ms")
    )
    audio_start_ms: Finite | None = None
    transcript: str | None = Field(
        default=None, validation_alias=AliasChoices("transcript", "text")
    )
    overlap_action: str | None = Field(
        default=None, validation_alias=AliasChoices("overlap_action", "overlap")
    )
    force_barge_in: bool | None = None
    force_listen: bool | None = None
    overlap_silence_rms: Finite | None = None

    # The hint fields, in the order the reference lists them.
    HINTS: ClassVar[tuple[str, ...]] = (
        "is_speech",
        "speech_probability",
        "vad",
        "duration_ms",
        "audio_start_ms",
        "transcript",
        "overlap_action",
        "force_barge_in",
        "force_listen",
        "overlap_silence_rms",
    )

    def hints(self) -> dict[str, Any]:
        """The hints the client gave, as JSON (absent ones left out)."""
        return self.model_dump(include=set(self.HINTS), exclude_none=True)


class VllmOmniCommit(ce.InputAudioCommit):
    """A commit; ``final`` and ``is_speech`` are the reference's."""

    final: bool = True
    is_speech: bool | None = None


class PushText(ce._Event):
    """Text input, under the reference's other name."""

    type: Literal["push_text"]
    text: str


class TurnSignal(ce._Event):
    """Another event, carried as ``event`` (its type) and ``payload`` (its other fields)."""

    type: Literal["turn.signal", "signal_turn"]
    event: str = Field(min_length=1)
    payload: FreeFormObject = Field(default_factory=dict)


VllmOmniClientEvent = Annotated[
    VllmOmniSessionUpdate
    | VllmOmniAppend
    | VllmOmniCommit
    | ce.InputAudioClear
    | ce.OutputAudioClear
    | ce.ResponseCreate
    | ce.ResponseCancel
    | ce.ItemCreate
    | ce.ItemRetrieve
    | ce.ItemDelete
    | ce.ItemTruncate
    | ce.SessionResume
    | ce.SessionEventAck
    | ce.SessionHeartbeat
    | ce.SessionClose
    | ce.PlaybackAck
    | ce.InputCancel
    | ce.BargeIn
    | ce.InputTextAppend
    | PushText
    | TurnSignal,
    Field(discriminator="type"),
]
VLLM_OMNI_CLIENT_EVENT: TypeAdapter[VllmOmniClientEvent] = TypeAdapter(VllmOmniClientEvent)


def _event_types() -> frozenset[str]:
    union = get_args(VllmOmniClientEvent)[0]
    return frozenset(
        name
        for model in get_args(union)
        for name in get_args(model.model_fields["type"].annotation)
    )


# Every `type` vLLM-Omni's endpoint accepts, aliases included.
VLLM_OMNI_EVENT_TYPES = _event_types()
