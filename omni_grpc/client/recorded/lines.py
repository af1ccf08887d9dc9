"""The lines of ``events.jsonl`` made fast: every chunk of a recording makes an append's line
and an audio delta's, and their JSON is proto JSON's (``message_json``), made here without a
walk over the message."""

from __future__ import annotations

from typing import Any

from omni_grpc.wire import pb

ENCODINGS: dict[int, str] = {int(v): pb.AudioEncoding.Name(v) for v in pb.AudioEncoding.values()}


def delta_json(delta: pb.OutputAudioDelta, *, timed: bool = True) -> dict[str, Any]:
    """An output audio delta as proto JSON (``message_json``'s output), without its audio
    (and without its place on the response's clock, ``timed`` False)."""
    body: dict[str, Any] = {}
    if delta.response_id:
        body["response_id"] = delta.response_id
    if delta.item_id:
        body["item_id"] = delta.item_id
    if delta.encoding:
        body["encoding"] = ENCODINGS[delta.encoding]
    if delta.sample_rate_hz:
        body["sample_rate_hz"] = delta.sample_rate_hz
    if timed and delta.start_ms:
        body["start_ms"] = delta.start_ms
    if timed and delta.duration_ms:
        body["duration_ms"] = delta.duration_ms
    return body


__all__ = ["ENCODINGS", "delta_json"]
