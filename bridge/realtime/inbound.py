"""Inbound: Realtime client frames → Protobuf commands, as pure functions (no sockets, no clock).

:func:`decode_client_event` parses one text frame into a typed client event
(:mod:`bridge.realtime.client_events`; in two halves, :func:`parse_client_frame` and
:func:`validate_client_event`, for a caller that reads the parsed frame first) and
:func:`to_request` turns it into one ``ConverseRequest``, unnumbered: the relay numbers commands
(``client_seq``) for its gRPC stream, so a JSON client never sees numbering. ``session.resume``
is not a command but the handshake of a new connection, and :func:`resume_request` builds that.
The other direction is :mod:`bridge.realtime.outbound`.

Refusals raise :class:`DialectError` with the reference protocol's codes (``invalid_json``,
``bad_event``, ``unknown_event``, ``bad_audio``, ``unsupported_audio_format`` …); the relay
answers them with an ``error`` event and keeps the websocket open. No other exception leaves
here: a value the contract cannot carry is a ``bad_event`` too.
"""

from __future__ import annotations

import binascii
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import orjson
from google.protobuf.message import Error as ProtobufError
from pydantic import TypeAdapter, ValidationError

from bridge.errors import DialectError, event_too_large
from bridge.options import MAX_EVENT_BYTES
from bridge.realtime import client_events as ce
from bridge.realtime.session_config import MODALITIES, audio_format, config_from_patch
from bridge.realtime.tools import call_item, tool_choice, toolset
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import quoted


def decode_client_event(
    frame: str | bytes,
    *,
    adapter: TypeAdapter[Any] = ce.CLIENT_EVENT,
    types: frozenset[str] = ce.CLIENT_EVENT_TYPES,
) -> Any:
    """Parses one text frame; raises DialectError for bad JSON, shape or type. ``adapter`` and
    ``types`` are a dialect's events (the OpenAI dialect's unless given)."""
    return validate_client_event(parse_client_frame(frame), adapter=adapter, types=types)


def parse_client_frame(frame: str | bytes) -> dict[str, Any]:
    """The first half of :func:`decode_client_event`: one text frame as a JSON object with a
    string ``type``, parsed once, for a caller that looks at it before validating it (the
    audio fast path, the unhonoured fields); raises DialectError for size, JSON and shape."""
    if len(frame) > MAX_EVENT_BYTES:
        raise event_too_large(MAX_EVENT_BYTES)
    try:
        data = orjson.loads(frame)
    except orjson.JSONDecodeError:
        raise DialectError("invalid_json", "the frame is not valid JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise DialectError(
            "bad_event", "an event must be a JSON object with a string type", param="type"
        )
    return data


def validate_client_event(
    data: dict[str, Any],
    *,
    adapter: TypeAdapter[Any] = ce.CLIENT_EVENT,
    types: frozenset[str] = ce.CLIENT_EVENT_TYPES,
) -> Any:
    """The second half of :func:`decode_client_event`: a parsed frame as a typed client event;
    raises DialectError for an unknown type or a bad field."""
    event_id = data.get("event_id")
    event_id = event_id if isinstance(event_id, str) else ""
    if data["type"] not in types:
        raise DialectError(
            "unknown_event",
            f"unknown event type {quoted(data['type'])}",
            param="type",
            event_id=event_id,
        )
    try:
        return adapter.validate_python(data)
    except ValidationError as error:
        # The first location element is the union tag; the rest is the field path. Of the
        # errors (one per member of a union a value failed), the one deepest in the event says
        # most: for a voice {"id": true}, that the id is not a string.
        found = [
            (_field_path(data, each["loc"][1:], missing=each["type"] == "missing"), each["msg"])
            for each in error.errors(include_url=False)
        ]
        param, why = max(found, key=lambda pair: pair[0].count(".") + bool(pair[0]))
        raise DialectError(
            "bad_event", f"{param or 'event'}: {why}", param=param, event_id=event_id
        ) from None


def _field_path(data: Any, loc: tuple[int | str, ...], *, missing: bool) -> str:
    """Where an error is, in the event's own keys and indices: pydantic's location also names
    the member of a union it tried (``constrained-int``, ``FormatObject``), which the client
    never wrote. A missing field is the one name that is not in the event."""
    parts, node = [], data
    for index, part in enumerate(loc):
        listed = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if listed or (isinstance(node, dict) and part in node):
            node = node[part]
        elif not (missing and index == len(loc) - 1):
            continue
        parts.append(str(part))
    return ".".join(parts)


def b64_audio(text: str, param: str) -> bytes:
    """Decodes base64 audio; raises ``bad_audio`` on ``param``."""
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        raise DialectError("bad_audio", "audio is not valid base64", param=param) from None


@contextlib.contextmanager
def _within_contract() -> Iterator[None]:
    """Turns a value Protobuf refuses into ``bad_event``. The models hold every value to the
    contract's bounds, so this is a bound they miss: still the client's event, answered in band
    instead of dropping the websocket."""
    try:
        yield
    except (ValueError, OverflowError, RecursionError, ProtobufError) as error:
        raise DialectError("bad_event", f"the event does not fit the contract: {error}") from None


def open_request(patch: ce.SessionPatch | None = None, *, model: str = "") -> pb.ConverseRequest:
    """Builds the ``open_session`` that starts a connection's session."""
    with _within_contract():
        config = config_from_patch(patch) if patch is not None else pb.SessionConfig()
    if model and not config.model:
        config.model = model
    return pb.ConverseRequest(open_session=pb.OpenSession(config=config))


def resume_request(event: ce.SessionResume) -> pb.ConverseRequest:
    """Builds the ``resume_session`` for a connection whose first message resumes."""
    return pb.ConverseRequest(
        event_id=event.event_id,
        resume_session=pb.ResumeSession(
            session_id=event.session_id,
            resume_token=event.resume_token,
            last_received_seq=event.last_received_server_event_seq,
        ),
    )


def _session_update(event: ce.SessionUpdate) -> pb.ConverseRequest:
    return pb.ConverseRequest(
        update_session=pb.UpdateSession(config=config_from_patch(event.session))
    )


def _append(event: ce.InputAudioAppend) -> pb.ConverseRequest:
    append = pb.AppendInputAudio(audio=b64_audio(event.audio, "audio"))
    if event.format is not None:
        fmt = audio_format(event.format, "format")
        append.encoding = fmt.encoding
        append.sample_rate_hz = fmt.sample_rate_hz
    if event.sample_rate_hz is not None:
        append.sample_rate_hz = event.sample_rate_hz
    if event.audio_end_ms is not None:
        append.audio_end_ms = event.audio_end_ms
    return pb.ConverseRequest(append_input_audio=append)


def _commit(event: ce.InputAudioCommit) -> pb.ConverseRequest:
    # OpenAI's commit never starts a response (response.create or turn detection does); the
    # reference's input.commit answers at once. Either way the event may say otherwise.
    create = event.create_response
    if create is None:
        create = event.type == "input.commit"
    return pb.ConverseRequest(commit_input_audio=pb.CommitInputAudio(create_response=create))


def _response_create(event: ce.ResponseCreate) -> pb.ConverseRequest:
    options = event.response
    create = pb.CreateResponse()
    modalities = options.output_modalities or options.modalities or []
    create.output_modalities.extend(MODALITIES[name] for name in modalities)
    if options.instructions is not None:
        create.instructions = options.instructions
    if options.metadata:
        create.metadata.update(options.metadata)
    if options.tools is not None:
        create.tools.CopyFrom(toolset(options.tools, "response.tools"))
    if options.tool_choice is not None:
        create.tool_choice.CopyFrom(tool_choice(options.tool_choice, "response.tool_choice"))
    if options.parallel_tool_calls is not None:
        create.parallel_tool_calls = options.parallel_tool_calls
    if options.conversation == "none":
        create.conversation = pb.RESPONSE_CONVERSATION_NONE
    if options.input is not None:
        create.input.SetInParent()  # set, even when empty: an empty input reads nothing
        for index, entry in enumerate(options.input):
            if entry.type == "item_reference":
                create.input.entries.add(item_reference=entry.id)
            else:
                create.input.entries.add(item=_item(entry, f"response.input.{index}"))
    cap = options.max_output_tokens or options.max_response_output_tokens
    if isinstance(cap, int):
        create.max_output_tokens = cap
    audio_out = options.audio.output if options.audio else None
    voice = (audio_out.voice if audio_out else None) or options.voice
    if voice is not None:
        create.voice = voice.id if isinstance(voice, ce.VoiceId) else voice
    return pb.ConverseRequest(create_response=create)


_ROLES = {
    "user": pb.ITEM_ROLE_USER,
    "assistant": pb.ITEM_ROLE_ASSISTANT,
    "system": pb.ITEM_ROLE_SYSTEM,
}
_CONTENT_TYPES = {
    "input_text": pb.CONTENT_TYPE_INPUT_TEXT,
    "text": pb.CONTENT_TYPE_INPUT_TEXT,
    "input_audio": pb.CONTENT_TYPE_INPUT_AUDIO,
    "output_text": pb.CONTENT_TYPE_OUTPUT_TEXT,
    "output_audio": pb.CONTENT_TYPE_OUTPUT_AUDIO,
}


def _item_create(event: ce.ItemCreate) -> pb.ConverseRequest:
    return pb.ConverseRequest(
        create_conversation_item=pb.CreateConversationItem(
            item=_item(event.item, "item"), previous_item_id=event.previous_item_id or ""
        )
    )


def _item(item: ce.ItemJson, at: str) -> pb.ConversationItem:
    """A conversation item a client made (``at``: where it is in the event, for params)."""
    if item.type in ("function_call", "function_call_output"):
        return call_item(item.type, item.id, item.call_id, item.name, item.arguments, item.output)
    if item.type != "message":
        raise DialectError(
            "unsupported_item_type",
            f"items of type {item.type!r} are not supported",
            param=f"{at}.type",
        )
    parts = []
    for index, content in enumerate(item.content):
        kind = _CONTENT_TYPES.get(content.type)
        if kind is None:
            raise DialectError(
                "unsupported_content_type",
                f"content of type {content.type!r} is not supported",
                param=f"{at}.content.{index}.type",
            )
        part = pb.ContentPart(type=kind, text=content.text or "")
        part.transcript = content.transcript or ""
        if content.audio:
            # The user's own audio, in the session's input format (the service checks where
            # it may be, and what the engine takes).
            part.audio = b64_audio(content.audio, f"{at}.content.{index}.audio")
        parts.append(part)
    return pb.ConversationItem(id=item.id, role=_ROLES[item.role], content=parts)


def _playback_ack(event: ce.PlaybackAck) -> pb.ConverseRequest:
    ack = pb.AckPlayback(
        played_ms=event.played_ms,
        response_id=event.response_id,
        item_id=event.item_id,
        truncate=event.truncate,
    )
    if event.committed_ms is not None:
        ack.committed_ms = event.committed_ms
    return pb.ConverseRequest(ack_playback=ack)


def _resume_later(event: ce.SessionResume) -> pb.ConverseRequest:
    raise DialectError(
        "unsupported_session_resume", "session.resume must be the first message of a new connection"
    )


_TRANSLATORS: dict[type[Any], Callable[[Any], pb.ConverseRequest]] = {
    ce.SessionUpdate: _session_update,
    ce.InputAudioAppend: _append,
    ce.InputAudioCommit: _commit,
    ce.InputAudioClear: lambda e: pb.ConverseRequest(clear_input_audio=pb.ClearInputAudio()),
    ce.OutputAudioClear: lambda e: pb.ConverseRequest(
        clear_output_audio=pb.ClearOutputAudio(response_id=e.response_id)
    ),
    ce.ResponseCreate: _response_create,
    ce.ResponseCancel: lambda e: pb.ConverseRequest(
        cancel_response=pb.CancelResponse(response_id=e.response_id)
    ),
    ce.ItemCreate: _item_create,
    ce.ItemRetrieve: lambda e: pb.ConverseRequest(
        retrieve_conversation_item=pb.RetrieveConversationItem(item_id=e.item_id)
    ),
    ce.ItemDelete: lambda e: pb.ConverseRequest(
        delete_conversation_item=pb.DeleteConversationItem(item_id=e.item_id)
    ),
    ce.ItemTruncate: lambda e: pb.ConverseRequest(
        truncate_conversation_item=pb.TruncateConversationItem(
            item_id=e.item_id, content_index=e.content_index, audio_end_ms=e.audio_end_ms
        )
    ),
    ce.SessionResume: _resume_later,
    ce.SessionEventAck: lambda e: pb.ConverseRequest(
        ack_events=pb.AckEvents(seq=e.server_event_seq)
    ),
    ce.SessionHeartbeat: lambda e: pb.ConverseRequest(heartbeat=pb.Heartbeat()),
    ce.SessionClose: lambda e: pb.ConverseRequest(close_session=pb.CloseSession(reason=e.reason)),
    ce.PlaybackAck: _playback_ack,
    ce.InputCancel: lambda e: pb.ConverseRequest(cancel_input=pb.CancelInput()),
    ce.BargeIn: lambda e: pb.ConverseRequest(barge_in=pb.BargeIn()),
    ce.InputTextAppend: lambda e: pb.ConverseRequest(
        append_input_text=pb.AppendInputText(text=e.text)
    ),
}


def to_request(event: ce.ClientEvent) -> pb.ConverseRequest:
    """Translates one client event into its unnumbered command; raises DialectError."""
    try:
        with _within_contract():
            # A dialect's event may subclass one of these: its base translates the common part.
            base = next(kind for kind in type(event).__mro__ if kind in _TRANSLATORS)
            request = _TRANSLATORS[base](event)
    except DialectError as error:
        error.event_id = event.event_id
        raise
    request.event_id = event.event_id
    return request
