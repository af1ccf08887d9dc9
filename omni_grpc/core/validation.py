"""Stateless checks of one command, before the session applies it.

Each check raises :class:`CommandError` with the reference protocol's code, so a bad command
is refused the same way whatever engine sits behind the session. A gRPC client builds its
messages itself, so the bounds the bridge holds JSON to (:mod:`omni_grpc.wire.bounds`) are
checked here again: free-form Structs bounded in depth and size, a response's metadata in pairs
and lengths, durations within their span.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from google.protobuf import duration_pb2, struct_pb2

from omni_grpc.core.errors import CommandError
from omni_grpc.core.limits import EngineFeatures, Limits
from omni_grpc.core.tools import check_call_item, check_tools
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import (
    MAX_DURATION_NANOS,
    MAX_DURATION_S,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_CHARS,
    MAX_POST_INSTRUCTIONS_TOKENS,
    MAX_RESPONSE_INPUT_ENTRIES,
    MAX_RESPONSE_OUTPUT_TOKENS,
    MAX_STRUCT_DEPTH,
    MAX_STRUCT_VALUES,
    MAX_VOICE_CHARS,
)
from omni_grpc.wire.pcm import SAMPLE_WIDTH

_IMAGE_TYPES = ("image/jpeg", "image/png")


def check_append(
    append: pb.AppendInputAudio,
    audio: bytes,
    config: pb.SessionConfig,
    limits: Limits,
    engine: EngineFeatures,
) -> tuple[pb.AudioEncoding.ValueType, int]:
    """Refuses audio the session cannot take: unknown format, torn samples, bad frames.

    ``audio`` is the append's audio, read once by the caller. Returns its format, resolved
    against the session's input format (an append may name its own).
    """
    encoding = append.encoding or config.input_audio_format.encoding
    rate_hz = append.sample_rate_hz or config.input_audio_format.sample_rate_hz
    check_audio(append, audio, encoding, rate_hz, limits, engine)
    return encoding, rate_hz


def check_audio(
    append: pb.AppendInputAudio,
    audio: bytes,
    encoding: int,
    rate_hz: int,
    limits: Limits,
    engine: EngineFeatures,
    frames: Sequence[pb.VideoFrame] | None = None,
) -> None:
    """:func:`check_append` with the format already resolved (what the session does, with its
    input format at hand, and the append's ``frames`` when it read them: upb builds a new
    container at each read)."""
    if frames is None:
        frames = append.video_frames
    if not audio and not frames:
        raise CommandError("bad_event", "an append needs audio or video frames", param="audio")
    if encoding not in engine.input_encodings:
        raise CommandError(
            "unsupported_audio_format", "input encoding not accepted", param="encoding"
        )
    if rate_hz not in engine.input_sample_rates_hz:
        raise CommandError(
            "unsupported_audio_format",
            f"input rate {rate_hz} Hz not accepted",
            param="sample_rate_hz",
        )
    if len(audio) % SAMPLE_WIDTH[encoding]:
        raise CommandError(
            "bad_audio", "audio length is not a whole number of samples", param="audio"
        )
    if frames:  # most appends have none
        check_video_frames(frames, limits)
    if append.HasField("hints"):  # most appends have none: no walk of an empty Struct
        check_struct(append.hints, "hints")


def check_video_frames(frames: Sequence[pb.VideoFrame], limits: Limits) -> None:
    """Refuses more frames than an append may carry, or frames that are not images."""
    if len(frames) > limits.max_video_frames:
        raise CommandError(
            "invalid_video_frames",
            f"at most {limits.max_video_frames} frames per append",
            param="video_frames",
        )
    for frame in frames:
        if frame.mime_type not in _IMAGE_TYPES or not frame.data:
            raise CommandError(
                "invalid_video_frames", "frames must be non-empty JPEG or PNG", param="video_frames"
            )


def check_struct(struct: struct_pb2.Struct, param: str) -> None:
    """Refuses a free-form Struct nested deeper, or holding more values, than the bounds."""
    values, level = 0, 1
    frontier: list[struct_pb2.Struct | struct_pb2.ListValue] = [struct]
    while frontier:
        if level > MAX_STRUCT_DEPTH:
            raise CommandError(
                "bad_event",
                f"objects and lists may nest at most {MAX_STRUCT_DEPTH} deep",
                param=param,
            )
        children: list[struct_pb2.Struct | struct_pb2.ListValue] = []
        for node in frontier:
            items: list[struct_pb2.Value] = (
                list(node.fields.values())
                if isinstance(node, struct_pb2.Struct)
                else list(node.values)
            )
            values += len(items)
            for item in items:
                kind = item.WhichOneof("kind")
                if kind == "struct_value":
                    children.append(item.struct_value)
                elif kind == "list_value":
                    children.append(item.list_value)
        if values > MAX_STRUCT_VALUES:
            raise CommandError(
                "bad_event",
                f"a free-form object may hold at most {MAX_STRUCT_VALUES} values",
                param=param,
            )
        level, frontier = level + 1, children


def check_metadata(metadata: Mapping[str, str], param: str) -> None:
    """Refuses a string map with more pairs, or longer keys or values, than the bounds."""
    if len(metadata) > MAX_METADATA_PAIRS:
        raise CommandError(
            "bad_event", f"metadata may hold at most {MAX_METADATA_PAIRS} pairs", param=param
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS or len(value) > MAX_METADATA_VALUE_CHARS:
            raise CommandError(
                "bad_event",
                f"metadata keys may have at most {MAX_METADATA_KEY_CHARS} characters"
                f" and values at most {MAX_METADATA_VALUE_CHARS}",
                param=param,
            )


def check_duration(duration: duration_pb2.Duration, param: str) -> None:
    """Refuses a Duration outside its documented span or with nanos of the other sign."""
    seconds, nanos = duration.seconds, duration.nanos
    if (
        abs(seconds) > MAX_DURATION_S
        or abs(nanos) > MAX_DURATION_NANOS
        or (seconds > 0 and nanos < 0)
        or (seconds < 0 and nanos > 0)
    ):
        raise CommandError("invalid_session_config", "the duration is out of range", param=param)


def check_config(config: pb.SessionConfig) -> None:
    """Refuses a session configuration whose free-form or duration fields are out of bounds."""
    check_duration(config.idle_timeout, "idle_timeout")
    check_struct(config.engine_options, "engine_options")
    check_tools(config.tools, "tools")
    check_truncation(config.truncation)


_TRUNCATION_TYPES = frozenset(pb.TruncationType.values())


def check_truncation(truncation: pb.Truncation) -> None:
    """Refuses a truncation out of its bounds, ``invalid_session_config`` naming the field: an
    unknown type, a retention ratio missing from RETENTION_RATIO, set on another type or
    outside 0 to 1, a token limit outside 1 to ``MAX_POST_INSTRUCTIONS_TOKENS`` or with
    DISABLED (which cuts nothing)."""
    kind = truncation.type
    if kind not in _TRUNCATION_TYPES:
        raise CommandError(
            "invalid_session_config", f"unknown truncation type {kind}", param="truncation.type"
        )
    ratio_param = "truncation.retention_ratio"
    if kind == pb.TRUNCATION_TYPE_RETENTION_RATIO:
        if not truncation.HasField("retention_ratio"):
            raise CommandError(
                "invalid_session_config",
                "retention_ratio truncation needs its ratio",
                param=ratio_param,
            )
        # Written so that NaN fails too.
        if not 0.0 <= truncation.retention_ratio <= 1.0:
            raise CommandError(
                "invalid_session_config", "retention_ratio must be in [0, 1]", param=ratio_param
            )
    elif truncation.HasField("retention_ratio"):
        raise CommandError(
            "invalid_session_config",
            "retention_ratio is only for retention_ratio truncation",
            param=ratio_param,
        )
    if truncation.HasField("post_instructions_token_limit"):
        limit_param = "truncation.post_instructions_token_limit"
        if kind == pb.TRUNCATION_TYPE_DISABLED:
            raise CommandError(
                "invalid_session_config",
                "disabled truncation takes no token limit",
                param=limit_param,
            )
        if not 1 <= truncation.post_instructions_token_limit <= MAX_POST_INSTRUCTIONS_TOKENS:
            raise CommandError(
                "invalid_session_config",
                f"post_instructions must be in [1, {MAX_POST_INSTRUCTIONS_TOKENS}] tokens",
                param=limit_param,
            )


def check_audio_item(item: pb.ConversationItem, limits: Limits, engine: EngineFeatures) -> None:
    """Refuses audio in a created item unless it is a user message's only part, an input
    audio part within the pending-input bound, and the engine takes such items. (Its samples
    are checked where it is decoded, at the edge: only there is the session's format known.)"""
    for index, part in enumerate(item.content):
        if not part.audio:
            continue
        param = f"item.content.{index}.audio"
        if not engine.supports_input_audio_items:
            raise CommandError(
                "unsupported_content",
                "this engine takes audio only in the input buffer",
                param=param,
            )
        user_message = item.type in (pb.ITEM_TYPE_UNSPECIFIED, pb.ITEM_TYPE_MESSAGE) and (
            item.role in (pb.ITEM_ROLE_UNSPECIFIED, pb.ITEM_ROLE_USER)
        )
        if not user_message or part.type != pb.CONTENT_TYPE_INPUT_AUDIO:
            raise CommandError("bad_event", "only a user's input_audio part has audio", param=param)
        if len(item.content) != 1:
            raise CommandError("bad_event", "an item's audio is its only part", param=param)
        if len(part.audio) > limits.max_pending_input_bytes:
            raise CommandError(
                "bad_event",
                f"an item's audio has at most {limits.max_pending_input_bytes} bytes",
                param=param,
            )


def check_response_options(
    create: pb.CreateResponse, limits: Limits, engine: EngineFeatures
) -> None:
    """Refuses a response's own options out of their bounds: out of band or with its own input
    where the engine has neither, more input entries than the bound or more text than a typed
    input may hold, an entry without its item or its reference, audio in a given item, a cap
    outside 1 to 4096 tokens, a voice's name too long. That a reference names an item of the
    conversation only the engine knows (it refuses ``item_not_found``, ``input.N.id``)."""
    if create.HasField("max_output_tokens") and not (
        0 < create.max_output_tokens <= MAX_RESPONSE_OUTPUT_TOKENS
    ):
        raise CommandError(
            "bad_event",
            f"max_output_tokens is 1 to {MAX_RESPONSE_OUTPUT_TOKENS}",
            param="max_output_tokens",
        )
    if create.HasField("voice") and len(create.voice) > MAX_VOICE_CHARS:
        raise CommandError(
            "bad_event", f"a voice has at most {MAX_VOICE_CHARS} characters", param="voice"
        )
    out_of_band = create.conversation == pb.RESPONSE_CONVERSATION_NONE
    if (out_of_band or create.HasField("input")) and not engine.supports_out_of_band_responses:
        raise CommandError(
            "out_of_band_unsupported",
            f"the {engine.name} engine runs no out-of-band responses nor responses with their"
            " own input",
            param="conversation" if out_of_band else "input",
        )
    if create.conversation not in (
        pb.RESPONSE_CONVERSATION_UNSPECIFIED,
        pb.RESPONSE_CONVERSATION_AUTO,
        pb.RESPONSE_CONVERSATION_NONE,
    ):
        raise CommandError("bad_event", "unknown conversation", param="conversation")
    entries = create.input.entries
    if len(entries) > MAX_RESPONSE_INPUT_ENTRIES:
        raise CommandError(
            "bad_event",
            f"a response's input has at most {MAX_RESPONSE_INPUT_ENTRIES} entries",
            param="input",
        )
    chars = 0
    for index, entry in enumerate(entries):
        at = f"input.{index}"
        which = entry.WhichOneof("entry")
        if which == "item_reference":
            if not entry.item_reference:
                raise CommandError("missing_item_id", "a reference names an item", param=f"{at}.id")
            continue
        if which is None:
            raise CommandError("bad_event", "an entry is an item or a reference", param=at)
        item = entry.item
        check_call_item(item, at)
        for part_index, part in enumerate(item.content):
            if part.audio:
                raise CommandError(
                    "unsupported_content",
                    "an item of a response's input has text only; reference an item of the"
                    " conversation for its audio",
                    param=f"{at}.content.{part_index}.audio",
                )
            chars += len(part.text) + len(part.transcript)
        chars += len(item.output) + len(item.arguments)
    if chars > limits.max_text_chars:
        raise CommandError(
            "bad_event",
            f"a response's input holds at most {limits.max_text_chars} characters of text",
            param="input",
        )


def check_item_id(item_id: str) -> None:
    """Refuses a command about an item without naming it."""
    if not item_id:
        raise CommandError("missing_item_id", "item_id is required", param="item_id")


def check_command(
    request: pb.ConverseRequest, kind: str, limits: Limits, engine: EngineFeatures
) -> None:
    """Runs the checks that need nothing but the command (and server-wide facts)."""
    if request.trace_context:  # any command may carry one; bounded like other string maps
        check_metadata(request.trace_context, "trace_context")
    if kind == "append_input_text" and len(request.append_input_text.text) > limits.max_text_chars:
        raise CommandError("bad_event", "text too long", param="text")
    elif kind == "barge_in" and not engine.supports_barge_in:
        raise CommandError("barge_in_unsupported", "this engine cannot barge in")
    elif kind == "create_response":
        check_metadata(request.create_response.metadata, "metadata")
        check_response_options(request.create_response, limits, engine)
    elif kind == "retrieve_conversation_item":
        check_item_id(request.retrieve_conversation_item.item_id)
    elif kind == "delete_conversation_item":
        check_item_id(request.delete_conversation_item.item_id)
    elif kind == "truncate_conversation_item":
        check_item_id(request.truncate_conversation_item.item_id)
        if request.truncate_conversation_item.audio_end_ms < 0:
            raise CommandError(
                "bad_event", "audio_end_ms must not be negative", param="audio_end_ms"
            )
    elif kind == "ack_playback":
        ack = request.ack_playback
        if ack.played_ms < 0 or (ack.HasField("committed_ms") and ack.committed_ms < 0):
            raise CommandError(
                "bad_event", "played_ms and committed_ms must not be negative", param="played_ms"
            )
    elif kind == "create_conversation_item":
        if not request.create_conversation_item.HasField("item"):
            raise CommandError("bad_event", "item is required", param="item")
        check_call_item(request.create_conversation_item.item)
        check_audio_item(request.create_conversation_item.item, limits, engine)
