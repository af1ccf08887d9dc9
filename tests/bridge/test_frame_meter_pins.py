"""The private parts of aiohttp that ``bridge/frame_meter.py`` stands on, pinned.

aiohttp has no public seam between a connection's bytes and its websocket frame parser, so the
meter takes the parser's place on the request handler right after ``_post_start`` set it. What
that relies on is named here, so that an aiohttp upgrade that moves any of it fails this test,
naming the part, before the behaviour tests fail in a less telling way:

* ``aiohttp`` is pinned to one exact version (the one these parts were read from);
* ``WebSocketResponse._post_start(request, protocol, writer)`` exists with that signature, and
  sets the parser through ``request.protocol.set_parser``;
* ``RequestHandler`` keeps the parser in the slot ``_payload_parser``, and bytes that came
  before the parser in ``_message_tail``, and ``data_received`` feeds both from there.
"""

from __future__ import annotations

import inspect
import tomllib
from pathlib import Path

import aiohttp
from aiohttp import web, web_protocol

from bridge.frame_meter import MeteredSocket

ROOT = Path(__file__).resolve().parents[2]


def test_aiohttp_is_pinned_to_the_version_the_meter_was_read_from() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = [pin for pin in pyproject["project"]["dependencies"] if pin.startswith("aiohttp")]
    assert pins == [f"aiohttp=={aiohttp.__version__}"]


def test_post_start_has_the_signature_the_meter_overrides() -> None:
    theirs = inspect.signature(web.WebSocketResponse._post_start)
    ours = inspect.signature(MeteredSocket._post_start)
    assert list(theirs.parameters) == ["self", "request", "protocol", "writer"]
    assert list(ours.parameters) == list(theirs.parameters)
    assert "request.protocol.set_parser(" in inspect.getsource(web.WebSocketResponse._post_start)


def test_the_request_handler_keeps_its_parser_where_the_meter_takes_its_place() -> None:
    handler = web_protocol.RequestHandler
    assert {"_payload_parser", "_message_tail"} <= set(handler.__slots__)
    feeding = inspect.getsource(handler.data_received)
    assert "self._payload_parser" in feeding and "self._message_tail" in feeding
    setting = inspect.getsource(handler.set_parser)
    # It feeds the bytes that came first to the parser it sets: the meter moves them past it.
    assert "self._payload_parser = parser" in setting and "self._message_tail" in setting
