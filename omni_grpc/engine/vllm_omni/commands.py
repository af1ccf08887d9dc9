"""Our commands and session configuration, as vLLM-Omni's duplex commands and session object.

vLLM-Omni's classes are passed in (the ``commands`` module of ``vllm_omni.engine.duplex``),
so this module imports no vLLM-Omni and its mapping can be read on its own. Every command
gets an ``event_id`` of our making, which vLLM-Omni echoes on the error it may answer with;
:class:`Correlation` turns that id back into the command's ``client_seq`` and ``event_id``.
"""

from __future__ import annotations

import binascii
import collections
from typing import Any

from google.protobuf import json_format

from omni_grpc.core import commands as cmd
from omni_grpc.core.errors import CommandError
from omni_grpc.engine import kit
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ

_CORRELATIONS_KEPT = 1024  # commands whose late error can still name them

_ROLES = {pb.ITEM_ROLE_USER: "user", pb.ITEM_ROLE_ASSISTANT: "assistant"}
_ROLES_BY_NAME = {name: role for role, name in _ROLES.items()}
_PART_TYPES = {
    pb.CONTENT_TYPE_INPUT_TEXT: "input_text",
    pb.CONTENT_TYPE_INPUT_AUDIO: "input_audio",
    pb.CONTENT_TYPE_OUTPUT_TEXT: "output_text",
    pb.CONTENT_TYPE_OUTPUT_AUDIO: "output_audio",
}
_PART_TYPES_BY_NAME = {name: kind for kind, name in _PART_TYPES.items()} | {
    "text": pb.CONTENT_TYPE_OUTPUT_TEXT,
    "audio": pb.CONTENT_TYPE_OUTPUT_AUDIO,
}
_VAD = pb.TURN_DETECTION_TYPE_SERVER_VAD


class Correlation:
    """Our event ids for vLLM-Omni commands, and the commands they stand for (bounded)."""

    def __init__(self, session_id: str) -> None:
        self._prefix = f"{session_id}:"
        self._commands: collections.OrderedDict[str, tuple[int, str]] = collections.OrderedDict()

    def event_id(self, command: cmd.EngineCommand) -> str:
        event_id = f"{self._prefix}{command.client_seq}"
        self._commands[event_id] = (command.client_seq, command.event_id)
        while len(self._commands) > _CORRELATIONS_KEPT:
            self._commands.popitem(last=False)
        return event_id

    def command(self, event_id: object) -> tuple[int, str]:
        """The (client_seq, client event_id) of the command ``event_id`` names, or (0, "")."""
        return self._commands.get(event_id, (0, "")) if isinstance(event_id, str) else (0, "")


def realtime_session(config: pb.SessionConfig, defaults: dict[str, object]) -> dict[str, object]:
    """The Realtime ``session`` object vLLM-Omni opens or updates a session with."""
    speaks = pb.MODALITY_AUDIO in config.output_modalities or not config.output_modalities
    session: dict[str, object] = {
        "modalities": ["audio", "text"] if speaks else ["text"],
        # Engines take and give canonical audio: pcm16, 16 kHz in (every append says so) and
        # 24 kHz out; the transport converts for the client.
        "input_audio_format": "pcm16",
        "output_audio_format": "pcm16",
    }
    if config.instructions:
        session["instructions"] = config.instructions
    if config.voice:
        session["voice"] = config.voice
    if config.HasField("temperature"):
        session["temperature"] = config.temperature
    td = config.turn_detection
    if td.type == _VAD:
        session["turn_detection"] = {
            "type": "server_vad",
            "threshold": td.threshold,
            "prefix_padding_ms": td.prefix_padding_ms,
            "silence_duration_ms": td.silence_duration_ms,
            "create_response": td.create_response,
            "interrupt_response": td.interrupt_response,
        }
    else:
        session["turn_detection"] = None
    # vLLM-Omni's extra_body: the engine's defaults, then the session's engine options
    # (ref_audio among them), then the extra_body a vLLM-Omni client gave (its dialect keeps
    # it whole in the engine option of that name).
    options = _plain(json_format.MessageToDict(config.engine_options))
    given = options.pop("extra_body", {})
    extra = {**defaults, **options, **(given if isinstance(given, dict) else {})}
    session["extra_body"] = extra
    return session


def _plain(value: Any) -> Any:
    """JSON from a Struct, with whole numbers as ints: a Struct keeps every number as a
    double, and vLLM-Omni reads counts such as ``force_listen_count`` as ints."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def realtime_item(item: pb.ConversationItem) -> dict[str, object]:
    """A conversation item as a Realtime item object."""
    content = []
    for part in item.content:
        entry: dict[str, object] = {"type": _PART_TYPES.get(part.type, "input_text")}
        if part.text:
            entry["text"] = part.text
        if part.transcript:
            entry["transcript"] = part.transcript
        content.append(entry)
    body: dict[str, object] = {
        "type": "message",
        "role": _ROLES.get(item.role, "user"),
        "content": content,
    }
    if item.id:
        body["id"] = item.id
    return body


def conversation_item(body: object) -> pb.ConversationItem:
    """A Realtime item object as a conversation item."""
    if not isinstance(body, dict):
        return pb.ConversationItem()
    status = body.get("status")
    item = pb.ConversationItem(
        id=str(body.get("id") or ""),
        role=_ROLES_BY_NAME.get(str(body.get("role")), pb.ITEM_ROLE_USER),
        status=pb.ITEM_STATUS_COMPLETED if status == "completed" else pb.ITEM_STATUS_INCOMPLETE,
    )
    for part in body.get("content") or ():
        if isinstance(part, dict):
            duration = part.get("audio_duration_ms")
            item.content.append(
                pb.ContentPart(
                    type=_PART_TYPES_BY_NAME.get(str(part.get("type")), pb.CONTENT_TYPE_INPUT_TEXT),
                    text=str(part.get("text") or ""),
                    transcript=str(part.get("transcript") or ""),
                    audio_duration_ms=float(duration) if isinstance(duration, int | float) else 0.0,
                )
            )
    return item


def command_for(
    command: cmd.EngineCommand, commands: Any, event_id: str, commit_answers: bool | None
) -> Any:
    """The vLLM-Omni command for one of ours; CommandError for one it has no equal of.

    ``commit_answers`` is what a commit that does not say whether to answer means: the
    session's turn detection, or None where the model owns the turns.
    """
    match command:
        case cmd.AppendAudio():
            kit.assert_canonical_input(command)  # the core and edge saw to it
            hints = _plain(json_format.MessageToDict(command.hints)) if command.hints else {}
            is_speech = hints.get("is_speech")
            return commands.AppendAudio(
                audio=command.audio,
                format="pcm16",
                sample_rate_hz=CANONICAL_INPUT_RATE_HZ,
                is_speech=is_speech if isinstance(is_speech, bool) else None,
                video_frames=tuple(
                    binascii.b2a_base64(frame.data, newline=False).decode("ascii")
                    for frame in command.video_frames
                ),
                hints=hints,
                event_id=event_id,
            )
        case cmd.CommitAudio(create_response=asked):
            answer = commit_answers if asked is None else asked
            return commands.Commit(create_response=answer, event_id=event_id)
        case cmd.CreateResponse():
            options: dict[str, object] = {}
            if command.output_modalities:
                speaks = pb.MODALITY_AUDIO in command.output_modalities
                options["modalities"] = ["audio", "text"] if speaks else ["text"]
            if command.instructions is not None:
                options["instructions"] = command.instructions
            return commands.CreateResponse(options=options, event_id=event_id)
        case cmd.CancelResponse(response_id=named):
            return commands.CancelResponse(response_id=named or None, event_id=event_id)
        case cmd.ClearOutput(response_id=named):
            return commands.ClearOutputAudio(response_id=named or None, event_id=event_id)
        case cmd.CreateItem(item=item, previous_item_id=previous):
            return commands.CreateItem(
                item=realtime_item(item), previous_item_id=previous or None, event_id=event_id
            )
        case cmd.RetrieveItem(item_id=item_id):
            return commands.SignalTurn(
                event="conversation.item.retrieve",
                signal_payload={"item_id": item_id},
                event_id=event_id,
            )
        case cmd.DeleteItem(item_id=item_id):
            return commands.DeleteItem(item_id=item_id, event_id=event_id)
        case cmd.TruncateItem():
            return commands.TruncateItem(
                item_id=command.item_id,
                audio_end_ms=int(command.audio_end_ms),
                content_index=command.content_index,
                event_id=event_id,
            )
        case cmd.AckPlayback():
            committed = command.committed_ms
            return commands.AckPlayback(
                played_ms=int(command.played_ms),
                committed_ms=None if committed is None else int(committed),
                response_id=command.response_id or None,
                item_id=command.item_id or None,
                event_id=event_id,
            )
        case cmd.ClearAudio():
            return commands.ClearInput(event_id=event_id)
        case cmd.CancelInput():
            return commands.CancelInput(event_id=event_id)
        case cmd.BargeIn():
            return commands.BargeIn(event_id=event_id)
        case cmd.AppendText(text=text):
            return commands.AppendText(text=text, event_id=event_id)
    kind = cmd.kind_of(command)
    raise CommandError("bad_event", f"the vllm-omni engine does not take {kind}")
