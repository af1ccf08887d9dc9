"""A recorded session's files, as the server writes them and the tools read them.

A recording is a folder named after its session (``<record dir>/<session_id>/``):

* ``manifest.json``: the session (engine and its options, versions, redaction), and one *part*
  per replica it lived on, each with its files, its start and end, its configurations as they
  changed, and where its recording stopped if it did;
* ``wire.bin``: what the server wrote of the first part as it went, the *wire log*: every
  command and every event as its protobuf bytes, and the audio the engine heard where it is not
  the audio the client sent, each a length-prefixed record (:data:`WIRE_RECORD`);
* ``events.jsonl``: every command and every event of the first part, in order, one JSON object
  a line (:data:`LINE_TYPES`); ``audio.wav``: its two tracks, the user on the left and the
  assistant on the right. The readers make both from the wire log when they read it
  (:mod:`omni_grpc.client.recorded`); a recording of format 1 has them as the server wrote them.
  A later part (a peer adopted the session) has ``wire.<n>.bin``, ``events.<n>.jsonl`` and
  ``audio.<n>.wav``.

docs/recordings.md describes every field. This module holds what writer and readers share:
the file names, the wire log's records, the line types, and how a message becomes JSON (text
left out on request).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

FORMAT = 2  # 1: events.jsonl and audio.wav written by the server itself, no wire log
MANIFEST = "manifest.json"
# A wire log's record: its header, then ``size`` bytes. The header: the record's kind, its flags,
# an audio encoding and rate (the audio the engine heard: a HEARD record's, or an append's
# when it heard the audio as sent), the server's monotonic time, a number (a command's or a
# stream event's attachment generation, a numbered event's seq), and the size. Little-endian.
WIRE_RECORD = struct.Struct("<BBHdQII")
# The kinds. OPEN, NOTE and END hold a JSON object (the part's header, a note, the end); COMMAND
# a ConverseRequest, EVENT and STREAM a ConverseResponse; HEARD raw audio, the engine's, for
# the COMMAND that follows it (an append converted by the edge, a commit's resampler tail).
W_OPEN, W_COMMAND, W_HEARD, W_EVENT, W_STREAM, W_NOTE, W_END = range(1, 8)
# The flags. A command skipped as a duplicate or as stale; an append whose audio the engine
# heard as sent (no HEARD record); an event an adopter restored from the store; audio left out
# (the body then starts with the audio's length, a little-endian u32, and the message's audio
# field is empty).
SKIPPED_DUPLICATE, SKIPPED_STALE, HEARD_AS_SENT, RESTORED, AUDIO_OMITTED = 1, 2, 4, 8, 16
SKIP_FLAGS = {"": 0, "duplicate": SKIPPED_DUPLICATE, "stale": SKIPPED_STALE}
OMITTED_SIZE = struct.Struct("<I")
TRACKS = ("user", "assistant")  # the WAV's channels, left to right
# The types of events.jsonl's lines: the part's header, a command the server read, an event
# the session numbered (seq > 0), an event of one stream only (seq 0: created, resumed,
# replaced, resync, going away), a note (the assistant's heard audio placed, a detach, a stop),
# and the part's last line.
LINE_TYPES = ("recording", "command", "event", "stream", "note", "end")
# The keys whose string values are a person's words, or words about them: left out of a
# recording made without text (SessionRecording.omit_text); a transcription prompt may name
# people. A transcript's ``logprobs`` hold its words as tokens and bytes: left out whole.
TEXT_KEYS = frozenset(
    {"text", "transcript", "delta", "instructions", "arguments", "output", "metadata", "prompt"}
)


def wire_file(part: int) -> str:
    """The wire log of part ``part`` (format 2 on)."""
    return "wire.bin" if part == 1 else f"wire.{part}.bin"


def wire_records(data: bytes) -> Iterator[tuple[int, int, int, float, int, int, bytes]]:
    """The whole records of a wire log: (kind, flags, encoding, t, number, rate, body); a torn
    last record (a crash mid-write) is left out."""
    at, header = 0, WIRE_RECORD.size
    view = memoryview(data)
    while at + header <= len(data):
        kind, flags, encoding, t, number, rate, size = WIRE_RECORD.unpack_from(data, at)
        end = at + header + size
        if end > len(data):
            return
        yield kind, flags, encoding, t, number, rate, bytes(view[at + header : end])
        at = end


def events_file(part: int) -> str:
    """The events of part ``part`` (1: the replica that opened the session)."""
    return "events.jsonl" if part == 1 else f"events.{part}.jsonl"


def audio_file(part: int) -> str:
    """The two-track WAV of part ``part``."""
    return "audio.wav" if part == 1 else f"audio.{part}.wav"


def message_json(message: Message) -> dict[str, Any]:
    """A message as proto JSON with the proto's own field names (snake_case)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def redact_text(node: Any) -> Any:
    """``node`` with every string under a key of :data:`TEXT_KEYS` (and every value of a
    ``metadata`` map) replaced by its length."""
    if isinstance(node, dict):
        return {key: _redacted(key, value) for key, value in node.items()}
    if isinstance(node, list):
        return [redact_text(each) for each in node]
    return node


def _redacted(key: str, value: Any) -> Any:
    if key in TEXT_KEYS and isinstance(value, str):
        return left_out(value)
    if key == "metadata" and isinstance(value, dict):
        return {name: left_out(str(text)) for name, text in value.items()}
    if key == "logprobs" and isinstance(value, list):
        return []
    return redact_text(value)


# Words that make an option's name a secret's: its value never reaches a recording, at any depth.
SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "credential", "auth")
SECRET_LEFT_OUT = "<left out>"
# The fields whose objects are options a client or operator names freely (a Struct).
OPTIONS_KEYS = frozenset({"engine_options"})


def redact_secrets(node: Any) -> Any:
    """``node`` with every value under an options object (:data:`OPTIONS_KEYS`) whose name
    holds a secret word (:data:`SECRET_WORDS`, in any case, ``api_key`` and ``apiKey`` alike)
    left out, however deep it is nested."""
    if isinstance(node, dict):
        return {
            key: secrets_left_out(value) if key in OPTIONS_KEYS else redact_secrets(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [redact_secrets(each) for each in node]
    return node


def secrets_left_out(options: Any) -> Any:
    """``options`` (an object of named options) with every value under a secret's name left
    out, at any depth (see :func:`redact_secrets`)."""
    if isinstance(options, dict):
        return {
            name: SECRET_LEFT_OUT if is_secret_name(str(name)) else secrets_left_out(value)
            for name, value in options.items()
        }
    if isinstance(options, list):
        return [secrets_left_out(each) for each in options]
    return options


def is_secret_name(name: str) -> bool:
    """Whether an option called ``name`` holds a secret (see :data:`SECRET_WORDS`)."""
    folded = name.lower()
    return any(word in folded for word in SECRET_WORDS)


def left_out(text: str) -> str:
    """What a recording without text holds in place of ``text``."""
    return f"<{len(text)} characters left out>"


__all__ = [
    "AUDIO_OMITTED",
    "FORMAT",
    "HEARD_AS_SENT",
    "LINE_TYPES",
    "MANIFEST",
    "OMITTED_SIZE",
    "OPTIONS_KEYS",
    "RESTORED",
    "SECRET_LEFT_OUT",
    "SECRET_WORDS",
    "SKIPPED_DUPLICATE",
    "SKIPPED_STALE",
    "SKIP_FLAGS",
    "TEXT_KEYS",
    "TRACKS",
    "WIRE_RECORD",
    "W_COMMAND",
    "W_END",
    "W_EVENT",
    "W_HEARD",
    "W_NOTE",
    "W_OPEN",
    "W_STREAM",
    "audio_file",
    "events_file",
    "is_secret_name",
    "left_out",
    "message_json",
    "redact_secrets",
    "redact_text",
    "secrets_left_out",
    "wire_file",
    "wire_records",
]
