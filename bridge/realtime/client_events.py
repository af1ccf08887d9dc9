"""Inbound: the client events of the Realtime dialect, as strict pydantic models on ``type``.

These are the only pydantic models on the inbound path: a frame is parsed once into one of
them and then translated into a Protobuf command by :mod:`bridge.realtime.inbound`. They accept what
stock clients send: the GA event and field names, the beta spellings of the session fields
(``modalities``, ``input_audio_format``, ``turn_detection`` …), and our duplex extensions,
named as vLLM-Omni's protocol names them (``session.resume``, ``playback.ack``, ``barge_in`` …),
with their aliases. Unknown fields are ignored, as OpenAI's server ignores them; wrong types are not
coerced (``"12"`` is not a number here), so a bad event is refused instead of guessed at.

Every number is held to what its contract field can carry (:mod:`omni_grpc.wire.bounds`):
32-bit counts and rates, finite floats, durations within Duration's span, and free-form objects
bounded in depth and size. An event outside them is refused here, with an ``error`` event,
instead of failing later inside Protobuf and taking the websocket down.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter

from bridge.realtime.tool_models import ToolChoiceSpec, ToolJson
from omni_grpc.wire.bounds import (
    MAX_DURATION_S,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_CHARS,
    MAX_STRUCT_DEPTH,
    MAX_STRUCT_VALUES,
    UINT32_MAX,
    UINT64_MAX,
)

# The contract's scalar types, as JSON numbers may fill them.
UInt32 = Annotated[int, Field(ge=0, le=UINT32_MAX)]
PositiveUInt32 = Annotated[int, Field(gt=0, le=UINT32_MAX)]
UInt64 = Annotated[int, Field(ge=0, le=UINT64_MAX)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
# Milliseconds of audio: any finite non-negative double.
Millis = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def _bounded_object(value: dict[str, Any]) -> dict[str, Any]:
    """Refuses a free-form object nested deeper or holding more values than a Struct may."""
    values, level, frontier = 0, 1, [value]
    while frontier:
        if level > MAX_STRUCT_DEPTH:
            raise ValueError(f"objects and lists may nest at most {MAX_STRUCT_DEPTH} deep")
        children: list[Any] = []
        for node in frontier:
            items = node.values() if isinstance(node, dict) else node
            values += len(items)
            children.extend(item for item in items if isinstance(item, dict | list))
        if values > MAX_STRUCT_VALUES:
            raise ValueError(f"a free-form object may hold at most {MAX_STRUCT_VALUES} values")
        level, frontier = level + 1, children
    return value


# engine_options: a JSON object that becomes a google.protobuf.Struct.
FreeFormObject = Annotated[dict[str, Any], AfterValidator(_bounded_object)]
# A response's metadata: string to string, like OpenAI's, in its bounds.
Metadata = Annotated[
    dict[
        Annotated[str, Field(max_length=MAX_METADATA_KEY_CHARS)],
        Annotated[str, Field(max_length=MAX_METADATA_VALUE_CHARS)],
    ],
    Field(max_length=MAX_METADATA_PAIRS),
]


class ClientModel(BaseModel):
    """The base of every client event and its parts: strict types, unknown fields ignored,
    frozen. Public: a dialect built on this one (``bridge.vllm_omni``) reads its own events on
    the same base."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class FormatObject(ClientModel):
    """A GA audio format object: a MIME ``type`` (``"audio/pcm"``) and, for PCM, a ``rate``;
    or the same object as the bridge renders it for what GA cannot name (a rate other than
    24 kHz in ``sample_rate_hz``, float PCM as ``encoding``), so a client may send back what
    it was shown."""

    type: str
    rate: PositiveUInt32 | None = None
    sample_rate_hz: PositiveUInt32 | None = None
    encoding: str | None = None


# A format is a GA object or a beta string such as "pcm16" or "g711_ulaw".
FormatSpec = FormatObject | str


class TurnDetectionJson(ClientModel):
    """``turn_detection`` as OpenAI spells it; ``null`` (handled by the caller) turns it off."""

    type: str
    threshold: Finite | None = None
    prefix_padding_ms: UInt32 | None = None
    silence_duration_ms: UInt32 | None = None
    create_response: bool | None = None
    interrupt_response: bool | None = None
    # semantic_vad's: how soon a turn ends (the contract's Eagerness; absent means "auto").
    eagerness: Literal["low", "medium", "high", "auto"] | None = None
    # How long the user may stay silent after an answer before being prompted (the service
    # bounds it; 0 or absent turns it off).
    idle_timeout_ms: UInt32 | None = None


class InterruptionJson(ClientModel):
    """``session.interruption``, a duplex extension: when speech over a reply ends it (the
    contract's InterruptionConfig, field for field; absent fields are left as they are)."""

    mode: Literal["speech", "words"] | None = None
    min_duration_ms: UInt32 | None = None
    min_words: UInt32 | None = None
    resume_false_interruption: bool | None = None
    false_interruption_timeout_ms: UInt32 | None = None


class TranscriptionJson(ClientModel):
    """Input transcription settings; ``null`` (handled by the caller) turns them off."""

    model: str | None = None
    language: str | None = None
    prompt: str | None = None


class NoiseReductionJson(ClientModel):
    """``audio.input.noise_reduction``; ``null`` (handled by the caller) turns it off."""

    type: Literal["near_field", "far_field"]


class VoiceId(ClientModel):
    """A custom voice named by id."""

    id: str


class AudioInputJson(ClientModel):
    """``session.audio.input``."""

    format: FormatSpec | None = None
    turn_detection: TurnDetectionJson | None = None
    transcription: TranscriptionJson | None = None
    noise_reduction: NoiseReductionJson | None = None


class AudioOutputJson(ClientModel):
    """``session.audio.output``."""

    format: FormatSpec | None = None
    voice: str | VoiceId | None = None


class AudioJson(ClientModel):
    """``session.audio``."""

    input: AudioInputJson | None = None
    output: AudioOutputJson | None = None


class RecordingJson(ClientModel):
    """``session.recording``: the contract's SessionRecording (docs/operations.md)."""

    enabled: bool | None = None
    omit_audio: bool = False
    omit_text: bool = False


class TokenLimitsJson(ClientModel):
    """``session.truncation.token_limits``."""

    post_instructions: UInt32 | None = None


class RetentionRatioJson(ClientModel):
    """``session.truncation`` as an object: keep a share of the limit at each cut. The ratio's
    range is the core's to check (``invalid_session_config`` naming it)."""

    type: Literal["retention_ratio"]
    retention_ratio: Finite
    token_limits: TokenLimitsJson | None = None


class SessionPatch(ClientModel):
    """The ``session`` of ``session.update``: GA fields, beta fields and our extensions.

    Which fields were given at all is read from ``model_fields_set``, because ``null`` means
    "turn off" for ``turn_detection`` and ``transcription`` while absence means "unchanged".
    """

    type: str | None = None
    model: str | None = None
    instructions: str | None = None
    output_modalities: list[Literal["text", "audio"]] | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    audio: AudioJson | None = None
    max_output_tokens: UInt32 | Literal["inf"] | None = None
    max_response_output_tokens: UInt32 | Literal["inf"] | None = None
    # Beta spellings, superseded by `audio`.
    input_audio_format: FormatSpec | None = None
    output_audio_format: FormatSpec | None = None
    voice: str | None = None
    turn_detection: TurnDetectionJson | None = None
    input_audio_transcription: TranscriptionJson | None = None
    input_audio_noise_reduction: NoiseReductionJson | None = None
    temperature: Finite | None = None
    # Duplex extensions.
    overlap_policy: Literal["listen_only", "barge_in_on_speech"] | None = None
    playback_commit_policy: Literal["commit_all_on_done", "ack_only"] | None = None
    interruption: InterruptionJson | None = None
    idle_timeout_ms: int | None = Field(default=None, gt=0, le=MAX_DURATION_S * 1000)
    idle_timeout_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S, allow_inf_nan=False)
    engine_options: FreeFormObject | None = None
    recording: RecordingJson | None = None
    # Function tools (bridge.realtime.tool_models).
    tools: list[ToolJson] | None = None
    tool_choice: ToolChoiceSpec | None = None
    parallel_tool_calls: bool | None = None
    # Extra output: the one kind OpenAI defines, the logprobs of input transcripts.
    include: list[Literal["item.input_audio_transcription.logprobs"]] | None = None
    truncation: Literal["auto", "disabled"] | RetentionRatioJson | None = None


class _Event(ClientModel):
    event_id: str = ""


class SessionUpdate(_Event):
    """Opens (as the first message) or reconfigures the session."""

    type: Literal["session.update"]
    session: SessionPatch = SessionPatch()


class InputAudioAppend(_Event):
    """Adds base64 audio to the input buffer; the session's input format unless it says."""

    type: Literal["input_audio_buffer.append"]
    audio: str = Field(validation_alias=AliasChoices("audio", "delta"))
    format: FormatSpec | None = None
    sample_rate_hz: PositiveUInt32 | None = Field(
        default=None, validation_alias=AliasChoices("sample_rate_hz", "sample_rate")
    )
    audio_end_ms: Millis | None = None


class InputAudioCommit(_Event):
    """Seals the input buffer into a user turn."""

    type: Literal["input_audio_buffer.commit", "input.commit"]
    create_response: bool | None = Field(
        default=None, validation_alias=AliasChoices("create_response", "response_create")
    )


class InputAudioClear(_Event):
    """Drops the input buffer."""

    type: Literal["input_audio_buffer.clear"]


class OutputAudioClear(_Event):
    """Stops the output audio of a response."""

    type: Literal["output_audio_buffer.clear"]
    response_id: str = ""


class ContentJson(ClientModel):
    """One content part of a conversation item."""

    type: str
    text: str | None = None
    transcript: str | None = None
    audio: str | None = None


class ItemJson(ClientModel):
    """A conversation item as a client creates it."""

    id: str = ""
    type: str = "message"
    role: Literal["user", "assistant", "system"] = "user"
    status: str | None = None
    content: list[ContentJson] = []
    # A function_call's or function_call_output's fields (bridge.realtime.tools).
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None


class ResponseAudioJson(ClientModel):
    """A response's ``audio``: its output alone (the input is the session's)."""

    output: AudioOutputJson | None = None


# A response's own cap on its output: OpenAI's 1 to 4096 tokens, or "inf" (the session's).
ResponseTokens = Annotated[int, Field(ge=1, le=4096)] | Literal["inf"]


class ResponseOptions(ClientModel):
    """The ``response`` of ``response.create``; a GA field the service cannot honour is refused
    (:mod:`bridge.realtime.unhonoured`), never ignored."""

    output_modalities: list[Literal["text", "audio"]] | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    instructions: str | None = None
    metadata: Metadata | None = None
    tools: list[ToolJson] | None = None
    tool_choice: ToolChoiceSpec | None = None
    parallel_tool_calls: bool | None = None
    # "auto" or "none" (out of band); a conversation's id is refused (realtime/unhonoured.py).
    conversation: str | None = None
    # Items and item references ({"type": "item_reference", "id": ...}); [] reads nothing.
    input: list[ItemJson] | None = None
    max_output_tokens: ResponseTokens | None = None
    max_response_output_tokens: ResponseTokens | None = None  # the beta spelling
    audio: ResponseAudioJson | None = None  # audio.output.voice (its format is refused)
    voice: str | VoiceId | None = None  # the beta spelling


class ResponseCreate(_Event):
    """Asks the engine to answer."""

    type: Literal["response.create"]
    response: ResponseOptions = ResponseOptions()


class ResponseCancel(_Event):
    """Cancels a response, the active one when no id is given."""

    type: Literal["response.cancel"]
    response_id: str = ""


class ItemCreate(_Event):
    """Adds an item to the conversation."""

    type: Literal["conversation.item.create"]
    item: ItemJson
    previous_item_id: str | None = None


class ItemRetrieve(_Event):
    """Fetches an item."""

    type: Literal["conversation.item.retrieve"]
    item_id: str = ""


class ItemDelete(_Event):
    """Removes an item."""

    type: Literal["conversation.item.delete"]
    item_id: str = ""


class ItemTruncate(_Event):
    """Cuts an assistant item's audio at ``audio_end_ms``."""

    type: Literal["conversation.item.truncate"]
    item_id: str = ""
    content_index: UInt32 = 0
    audio_end_ms: Millis


class SessionResume(_Event):
    """Reattaches to a session; only valid as the first message of a connection."""

    type: Literal["session.resume"]
    session_id: str = Field(min_length=1)
    resume_token: str = Field(min_length=1)
    last_received_server_event_seq: UInt64 = 0


class SessionEventAck(_Event):
    """Acknowledges every event up to ``server_event_seq``."""

    type: Literal["session.event_ack"]
    server_event_seq: UInt64


class SessionHeartbeat(_Event):
    """Keeps an idle session alive."""

    type: Literal["session.heartbeat"]


class SessionClose(_Event):
    """Closes the session for good."""

    type: Literal["session.close", "close", "close_session"]
    reason: str = ""


class PlaybackAck(_Event):
    """Reports how much of a response's audio the client has played."""

    type: Literal["playback.ack", "audio.playback_ack"]
    played_ms: Millis
    committed_ms: Millis | None = None
    response_id: str = ""
    item_id: str = ""
    truncate: bool = False


class InputCancel(_Event):
    """Drops buffered input and cancels the active response."""

    type: Literal["input.cancel"]


class BargeIn(_Event):
    """Interrupts the assistant at once."""

    type: Literal["barge_in"]


class InputTextAppend(_Event):
    """Adds text input to the conversation."""

    type: Literal["input_text.append", "input.text.append"]
    text: str


ClientEvent = Annotated[
    SessionUpdate
    | InputAudioAppend
    | InputAudioCommit
    | InputAudioClear
    | OutputAudioClear
    | ResponseCreate
    | ResponseCancel
    | ItemCreate
    | ItemRetrieve
    | ItemDelete
    | ItemTruncate
    | SessionResume
    | SessionEventAck
    | SessionHeartbeat
    | SessionClose
    | PlaybackAck
    | InputCancel
    | BargeIn
    | InputTextAppend,
    Field(discriminator="type"),
]
CLIENT_EVENT: TypeAdapter[ClientEvent] = TypeAdapter(ClientEvent)


def _event_types() -> frozenset[str]:
    union = get_args(ClientEvent)[0]  # Annotated[union, discriminator]: the union
    return frozenset(
        name
        for model in get_args(union)
        for name in get_args(model.model_fields["type"].annotation)
    )


# Every accepted `type` value, aliases included; anything else is an unknown event.
CLIENT_EVENT_TYPES = _event_types()
