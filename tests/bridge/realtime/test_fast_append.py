"""The inbound hot path for audio appends (bridge.realtime.fast_append) against the generic path.

Every frame the fast path takes must become the very command the models make of it, every
refusal must be the generic path's own, and every other frame must be left to the generic path.
"""

from __future__ import annotations

import base64

import orjson
import pytest

from bridge.dialects import OPENAI, make_dialect
from bridge.errors import DialectError
from bridge.realtime.fast_append import append_request
from bridge.realtime.inbound import MAX_EVENT_BYTES, parse_client_frame

AUDIO = base64.b64encode(bytes(range(256)) * 4).decode()


def _generic(frame: bytes) -> object:
    inbound = make_dialect(OPENAI, max_audio_delta_bytes=4096).inbound
    return inbound.to_request(inbound.decode(frame))


def _fast(frame: bytes) -> object:
    """The fast path's answer for a frame, parsed as the dialect parses it."""
    return append_request(parse_client_frame(frame))


def _refusal(call: object, frame: bytes) -> tuple[str, str, str | None, str]:
    with pytest.raises(DialectError) as caught:
        call(frame)  # type: ignore[operator]
    error = caught.value
    return error.code, error.message, error.param, error.event_id


@pytest.mark.parametrize(
    "event",
    [
        {"type": "input_audio_buffer.append", "audio": AUDIO},
        {"type": "input_audio_buffer.append", "audio": AUDIO, "event_id": "evt_1"},
        {"type": "input_audio_buffer.append", "audio": "", "event_id": ""},
    ],
)
def test_a_plain_append_becomes_the_generic_command(event: dict[str, str]) -> None:
    frame = orjson.dumps(event)
    fast = _fast(frame)
    assert fast is not None
    assert fast == _generic(frame)
    assert fast.append_input_audio.audio == base64.b64decode(event["audio"])
    inbound = make_dialect(OPENAI, max_audio_delta_bytes=4096).inbound
    assert inbound.request(frame) == fast


@pytest.mark.parametrize("audio", ["not base64!", "AAA", "QQ==QQ=="])
def test_bad_base64_is_refused_as_the_generic_path_refuses(audio: str) -> None:
    frame = orjson.dumps({"type": "input_audio_buffer.append", "audio": audio, "event_id": "e7"})
    assert _refusal(_fast, frame) == _refusal(_generic, frame)
    assert _refusal(_fast, frame)[0] == "bad_audio"


@pytest.mark.parametrize(
    "frame",
    [
        b"{not json",
        b"[1, 2]",
        b'"input_audio_buffer.append"',
        orjson.dumps({"type": "input_audio_buffer.commit"}),
        orjson.dumps({"type": "input_audio_buffer.append"}),
        orjson.dumps({"type": "input_audio_buffer.append", "audio": 5}),
        orjson.dumps({"type": "input_audio_buffer.append", "audio": AUDIO, "event_id": 5}),
        orjson.dumps({"type": "input_audio_buffer.append", "delta": AUDIO}),
        orjson.dumps({"type": "input_audio_buffer.append", "audio": AUDIO, "audio_end_ms": 20}),
        orjson.dumps({"type": "input_audio_buffer.append", "audio": AUDIO, "format": "pcm16"}),
        b'{"type": "input_audio_buffer.append", "audio": "' + b"A" * MAX_EVENT_BYTES + b'"}',
    ],
)
def test_every_other_frame_is_left_to_the_generic_path(frame: bytes) -> None:
    try:
        data = parse_client_frame(frame)
    except DialectError:
        pass  # too large, not JSON, or not an object with a type: refused before any path
    else:
        assert append_request(data) is None
    inbound = make_dialect(OPENAI, max_audio_delta_bytes=4096).inbound
    try:
        expected: object = _generic(frame)
    except DialectError as error:
        expected = (error.code, error.message, error.param, error.event_id)
        assert _refusal(inbound.request, frame) == expected
    else:
        assert inbound.request(frame) == expected
