"""The commands an engine takes: one frozen value per command, built once by the core.

The rules held here:

* **Typed once.** The core reads a command's fields from the protobuf request once, when it
  admits it (:mod:`.admission`), and hands the engine one of the values below; nothing after
  the core reads the request again, and engines never see a request type. Engines dispatch on
  the value's class (``match``, or a table keyed by class).
* **Frozen.** A value is a named tuple: cheap to build on the hot path (one call), and no layer
  can change what another layer decided. The edge, which converts an append's audio, returns a
  new value instead of changing the one it got.
* **Canonical audio.** :class:`AppendAudio` names its encoding and rate, resolved against the
  session's format. By the time an engine gets it, it is pcm16 at the canonical input rate or
  at a rate the engine declared native (``native``; the edge converts the rest).
* **Sub-messages the engines already speak stay.** A conversation item, the session
  configuration, tool definitions, video frames and hints travel as the protobuf values they
  are: they are data, not commands.
* **Addressed replies.** Every value carries the command's ``client_seq`` and ``event_id``, so
  an engine's refusal names the command it refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, TypeAlias

from google.protobuf import struct_pb2

from omni_grpc.wire import pb

_PCM16 = pb.AUDIO_ENCODING_PCM16


class UpdateSession(NamedTuple):
    """The whole configuration in force after an update (not the client's patch)."""

    config: pb.SessionConfig
    client_seq: int = 0
    event_id: str = ""


class AppendAudio(NamedTuple):
    """Input audio, in ``encoding`` at ``rate_hz``; ``native``: the engine takes it as it is.

    ``audio_end_ms`` is where the client says the chunk ends on its own media clock (None
    when it does not say); ``video_frames`` and ``hints`` are what came with the chunk.
    """

    audio: bytes
    encoding: int = _PCM16
    rate_hz: int = 0  # 0: the canonical input rate
    native: bool = True
    client_seq: int = 0
    event_id: str = ""
    audio_end_ms: float | None = None
    video_frames: tuple[pb.VideoFrame, ...] = ()
    hints: struct_pb2.Struct | None = None


class CommitAudio(NamedTuple):
    """Ends the input turn; ``create_response`` None: as the session's turn detection says."""

    create_response: bool | None = None
    client_seq: int = 0
    event_id: str = ""


class ClearAudio(NamedTuple):
    """Drops the uncommitted input."""

    client_seq: int = 0
    event_id: str = ""


class CancelInput(NamedTuple):
    """Drops the uncommitted input and cancels the running response."""

    client_seq: int = 0
    event_id: str = ""


class BargeIn(NamedTuple):
    """The user talks over the running response: it is cancelled, the input dropped."""

    client_seq: int = 0
    event_id: str = ""


class ClearOutput(NamedTuple):
    """Stops the output of ``response_id`` (empty: the running response)."""

    response_id: str = ""
    client_seq: int = 0
    event_id: str = ""


class InputEntry(NamedTuple):
    """One entry of a response's own input: an item given whole, or the id of one of the
    conversation's (``reference``)."""

    item: pb.ConversationItem | None = None
    reference: str = ""


class CreateResponse(NamedTuple):
    """Asks for a response; empty or None options mean the session's own.

    ``out_of_band``: its output joins no conversation and it runs beside the running response;
    ``input``: what it reads instead of the conversation (None: the conversation; empty: no
    context at all).
    """

    output_modalities: tuple[pb.Modality.ValueType, ...] = ()
    instructions: str | None = None
    metadata: Mapping[str, str] = {}
    tools: pb.ToolSet | None = None
    tool_choice: pb.ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    client_seq: int = 0
    event_id: str = ""
    out_of_band: bool = False
    input: tuple[InputEntry, ...] | None = None
    max_output_tokens: int | None = None
    voice: str | None = None


class CancelResponse(NamedTuple):
    """Cancels ``response_id`` (empty: the running response)."""

    response_id: str = ""
    client_seq: int = 0
    event_id: str = ""


class CreateItem(NamedTuple):
    """Adds ``item`` to the conversation after ``previous_item_id`` (empty: at the end)."""

    item: pb.ConversationItem
    previous_item_id: str = ""
    client_seq: int = 0
    event_id: str = ""


class RetrieveItem(NamedTuple):
    item_id: str
    client_seq: int = 0
    event_id: str = ""


class DeleteItem(NamedTuple):
    item_id: str
    client_seq: int = 0
    event_id: str = ""


class TruncateItem(NamedTuple):
    """Cuts an assistant item's audio (and transcript) at ``audio_end_ms``."""

    item_id: str
    content_index: int = 0
    audio_end_ms: float = 0.0
    client_seq: int = 0
    event_id: str = ""


class AckPlayback(NamedTuple):
    """How much of a response the listener heard, and what of it to keep."""

    played_ms: float
    committed_ms: float | None = None
    response_id: str = ""
    item_id: str = ""
    truncate: bool = False
    client_seq: int = 0
    event_id: str = ""


class AppendText(NamedTuple):
    """Typed user input: a user item of its own."""

    text: str
    client_seq: int = 0
    event_id: str = ""


EngineCommand: TypeAlias = (
    UpdateSession
    | AppendAudio
    | CommitAudio
    | ClearAudio
    | CancelInput
    | BargeIn
    | ClearOutput
    | CreateResponse
    | CancelResponse
    | CreateItem
    | RetrieveItem
    | DeleteItem
    | TruncateItem
    | AckPlayback
    | AppendText
)

# Each value's class, by the command's name in the contract (its ``oneof`` field), and back:
# the name is what refusals, logs and metrics say.
CLASSES: dict[str, type[EngineCommand]] = {
    "update_session": UpdateSession,
    "append_input_audio": AppendAudio,
    "commit_input_audio": CommitAudio,
    "clear_input_audio": ClearAudio,
    "cancel_input": CancelInput,
    "barge_in": BargeIn,
    "clear_output_audio": ClearOutput,
    "create_response": CreateResponse,
    "cancel_response": CancelResponse,
    "create_conversation_item": CreateItem,
    "retrieve_conversation_item": RetrieveItem,
    "delete_conversation_item": DeleteItem,
    "truncate_conversation_item": TruncateItem,
    "ack_playback": AckPlayback,
    "append_input_text": AppendText,
}
KINDS: dict[type[EngineCommand], str] = {cls: kind for kind, cls in CLASSES.items()}


def kind_of(command: EngineCommand) -> str:
    """The command's name in the contract (``append_input_audio``, ``commit_input_audio``…)."""
    return KINDS[type(command)]


def engine_command(request: pb.ConverseRequest, kind: str | None = None) -> EngineCommand:
    """The value for an engine command's request, its fields read once (an append as it came:
    the core resolves its format, see ``Admission.admit_audio``). ``kind``: the request's
    ``oneof`` field when the caller read it already. ValueError for any other command."""
    if kind is None:
        kind = request.WhichOneof("command")
    seq, event_id = request.client_seq, request.event_id
    if kind == "append_input_audio":
        append = request.append_input_audio
        return append_audio(
            append, append.audio, append.encoding, append.sample_rate_hz, seq, event_id
        )
    if kind == "commit_input_audio":
        commit = request.commit_input_audio
        create = commit.create_response if commit.HasField("create_response") else None
        return CommitAudio(create, seq, event_id)
    if kind == "create_response":
        return _create_response(request.create_response, seq, event_id)
    if kind == "create_conversation_item":
        create_item = request.create_conversation_item
        return CreateItem(create_item.item, create_item.previous_item_id, seq, event_id)
    if kind == "truncate_conversation_item":
        cut = request.truncate_conversation_item
        return TruncateItem(cut.item_id, cut.content_index, cut.audio_end_ms, seq, event_id)
    if kind == "ack_playback":
        ack = request.ack_playback
        committed = ack.committed_ms if ack.HasField("committed_ms") else None
        return AckPlayback(
            ack.played_ms, committed, ack.response_id, ack.item_id, ack.truncate, seq, event_id
        )
    if kind == "update_session":
        return UpdateSession(request.update_session.config, seq, event_id)
    if kind in _NAMED:
        field, cls = _NAMED[kind]
        return cls(getattr(getattr(request, kind), field), seq, event_id)
    if kind in _BARE:
        return _BARE[kind](seq, event_id)
    raise ValueError(f"{kind} is not a command for the engine")


def append_audio(
    append: pb.AppendInputAudio,
    audio: bytes,
    encoding: int,
    rate_hz: int,
    client_seq: int,
    event_id: str,
    native: bool = True,
) -> AppendAudio:
    """An append's value, its ``audio`` read once by the caller and its format resolved; the
    rare parts (media time, video, hints) read only when the chunk has some."""
    if not (append.video_frames or append.hints.fields or append.HasField("audio_end_ms")):
        return AppendAudio(audio, encoding, rate_hz, native, client_seq, event_id)
    return AppendAudio(
        audio,
        encoding,
        rate_hz,
        native,
        client_seq,
        event_id,
        append.audio_end_ms if append.HasField("audio_end_ms") else None,
        tuple(append.video_frames),
        append.hints if append.hints.fields else None,
    )


def _create_response(create: pb.CreateResponse, seq: int, event_id: str) -> CreateResponse:
    made = CreateResponse(
        tuple(create.output_modalities),
        create.instructions if create.HasField("instructions") else None,
        dict(create.metadata),
        create.tools if create.HasField("tools") else None,
        create.tool_choice if create.HasField("tool_choice") else None,
        create.parallel_tool_calls if create.HasField("parallel_tool_calls") else None,
        seq,
        event_id,
    )
    if not (
        create.conversation
        or create.HasField("input")
        or create.HasField("max_output_tokens")
        or create.HasField("voice")
    ):
        return made  # the usual response: nothing of its own beyond the above
    entries = None
    if create.HasField("input"):
        entries = tuple(
            InputEntry(reference=entry.item_reference)
            if entry.WhichOneof("entry") == "item_reference"
            else InputEntry(item=entry.item)
            for entry in create.input.entries
        )
    return made._replace(
        out_of_band=create.conversation == pb.RESPONSE_CONVERSATION_NONE,
        input=entries,
        max_output_tokens=(
            create.max_output_tokens if create.HasField("max_output_tokens") else None
        ),
        voice=create.voice if create.HasField("voice") else None,
    )


# Commands with one string field, and the bare ones.
_NAMED: dict[
    str, tuple[str, type[ClearOutput | CancelResponse | RetrieveItem | DeleteItem | AppendText]]
] = {
    "clear_output_audio": ("response_id", ClearOutput),
    "cancel_response": ("response_id", CancelResponse),
    "retrieve_conversation_item": ("item_id", RetrieveItem),
    "delete_conversation_item": ("item_id", DeleteItem),
    "append_input_text": ("text", AppendText),
}
_BARE: dict[str, type[ClearAudio | CancelInput | BargeIn]] = {
    "clear_input_audio": ClearAudio,
    "cancel_input": CancelInput,
    "barge_in": BargeIn,
}
