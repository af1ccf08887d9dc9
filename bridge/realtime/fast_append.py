"""The inbound hot path: an ``input_audio_buffer.append`` in its plainest form, without pydantic.

Nearly every frame a talking client sends is ``{"type": "input_audio_buffer.append", "audio":
"…"}``, perhaps with an ``event_id``. :func:`append_request` turns exactly that shape, parsed
once by :func:`bridge.realtime.inbound.parse_client_frame`, into its command with one base64
decode; any other event (another type, another field, a value of the wrong type) gets None, and
the dialect's generic path validates the same parsed object, so every refusal is the generic
path's own. The one refusal made here, audio that is not base64, is the one
:func:`bridge.realtime.inbound.to_request` makes: ``bad_audio`` on ``audio`` with the event's id.
"""

from __future__ import annotations

from typing import Any

from bridge.errors import DialectError
from bridge.realtime.inbound import b64_audio
from omni_grpc.wire import pb

APPEND = "input_audio_buffer.append"
# The fields of the shape taken here; with any other (format, sample_rate_hz, audio_end_ms, the
# "delta" spelling of audio) the frame goes the generic way.
_PLAIN_FIELDS = frozenset({"type", "audio", "event_id"})


def append_request(data: dict[str, Any]) -> pb.ConverseRequest | None:
    """The unnumbered command of a plain append event (a parsed frame), or None for any other."""
    if (
        data["type"] != APPEND
        or type(data.get("audio")) is not str
        or not _PLAIN_FIELDS.issuperset(data)
    ):
        return None
    event_id = data.get("event_id", "")
    if type(event_id) is not str:
        return None
    try:
        audio = b64_audio(data["audio"], "audio")
    except DialectError as error:
        error.event_id = event_id
        raise
    # Set field by field: three times quicker than building the nested message by keywords.
    request = pb.ConverseRequest()
    request.append_input_audio.audio = audio
    if event_id:
        request.event_id = event_id
    return request


__all__ = ["APPEND", "append_request"]
