"""Each socket's frames charged from their headers, before aiohttp reads them whole.

A :class:`FrameMeter` stands between a socket's connection and aiohttp's frame parser and reads
only the frame headers: each data frame is charged against the server's
:class:`~bridge.frame_budget.FrameBudget` from its header, before its payload is read, and the
charge is given back when the relay has handed the frame's command on. A frame that does not
fit waits with the rest of its bytes unread, and the socket's reading pauses (backpressure: its
sender meets TCP's flow control; nothing is cut).

A frame that alone is over the event cap (``max_event_bytes``, and within what the parser
takes) is refused from its header: its payload is dropped as it arrives, never buffered, and
the parser gets an empty frame of its kind in its place, which the relay answers
``event_too_large`` (:meth:`FrameMeter.dropped`). Read whole, such a frame cost the loop tens of
milliseconds in one slice (aiohttp joins, unmasks and copies it when its last byte comes), which
every other session on the loop waited behind, only to be refused for its length.

Large frames go one at a time per key (the budget holds that rule): when its last byte comes,
aiohttp joins and unmasks a frame, and the relay parses and decodes it, each in one slice of the
loop that every other session waits behind (tens of milliseconds for a few MiB); so a key's
large frames cannot pile those slices up in one pass of the loop, and another key's frames go
between them. :class:`MeteredSocket` is the websocket response that puts a meter in place.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from typing import Any

from aiohttp import web
from aiohttp.web_request import BaseRequest

from bridge.frame_budget import AUDIO_CHECK_BYTES, COPIES, LARGE_COST, FrameBudget
from bridge.metrics import FRAMES_HELD

_CONTINUATION = 0x0
_DATA_OPCODES = frozenset({_CONTINUATION, 0x1, 0x2})  # continuation, text, binary


def _header(data: bytes | bytearray, at: int) -> tuple[int, int, bool, int] | None:
    """(header length, opcode, fin, payload length) of the frame header at ``at``; None when
    ``data`` does not hold all of it yet."""
    if len(data) - at < 2:
        return None
    first, second = data[at], data[at + 1]
    length = second & 0x7F
    size = 2 + (2 if length == 126 else 8 if length == 127 else 0) + (4 if second & 0x80 else 0)
    if len(data) - at < size:
        return None
    if length == 126:
        length = struct.unpack_from("!H", data, at + 2)[0]
    elif length == 127:
        length = struct.unpack_from("!Q", data, at + 2)[0]
    return size, first & 0x0F, bool(first & 0x80), length


class FrameMeter:
    """One socket's frames on their way into aiohttp's parser, each charged from its header.

    It takes the parser's place on the connection (``feed_data``, ``feed_eof``); the relay calls
    :meth:`handled` once it has handed on each text or binary message it received, and
    :meth:`close` when the socket is done.
    """

    def __init__(
        self,
        parser: Any,
        protocol: Any,
        transport: Any,
        budget: FrameBudget,
        key: str,
        label: str = "none",
        max_frame_bytes: int = 1 << 62,
        max_event_bytes: int = 1 << 62,
    ) -> None:
        self._held_count = FRAMES_HELD.labels(label)  # the key's hashed label, or none
        self._max_frame_bytes = max_frame_bytes  # what the parser takes at most
        self._max_event_bytes = max_event_bytes  # a single frame above it is dropped unread
        self._parser = parser
        self._protocol = protocol
        self._transport = transport
        self._budget = budget
        self._key = key
        # A header not whole yet, held back from the parser: a frame that is dropped never
        # reaches it, not even in part.
        self._partial = b""
        self._payload_left = 0  # of the frame being read
        self._drop_left = 0  # of the frame being dropped
        self._in_message = False  # a message of several frames is under way
        self._message_cost = 0  # charged for the frames of the message not yet whole
        self._message_large = 0  # how many of them are large (bridge.frame_budget.LARGE_COST)
        # One per whole message not yet handled, in order: (its charge, its large frames,
        # dropped unread).
        self._costs: deque[tuple[int, int, bool]] = deque()
        self._held: tuple[int, bool, int] | None = None  # (cost, fin, audio) of a waiting frame
        self._stash = b""  # the bytes after a waiting frame's header
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    # -- the parser's place ------------------------------------------------------------

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if self._held is not None:
            self._stash += data
            self._pause()  # again, should aiohttp have resumed it
            return False, b""
        return self._feed(bytes(data))

    def feed_eof(self) -> None:
        self._parser.feed_eof()

    # -- the relay's side --------------------------------------------------------------

    def handled(self) -> None:
        """The oldest message received is handed on: its charge goes back."""
        if self._costs:
            cost, large, _ = self._costs.popleft()
            self._budget.give(self._key, cost, large)

    def dropped(self) -> bool:
        """Whether the oldest message not yet handled was over the event cap and dropped unread
        (the relay received an empty frame in its place)."""
        return bool(self._costs) and self._costs[0][2]

    def close(self) -> None:
        """The socket is done: every charge goes back, and a waiting frame stops waiting."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        self._budget.stop_waiting(self)
        self._held, self._stash = None, b""
        cost = sum(charge for charge, _, _ in self._costs) + self._message_cost
        large = sum(count for _, count, _ in self._costs) + self._message_large
        self._costs.clear()
        self._message_cost = self._message_large = 0
        self._budget.give(self._key, cost, large)

    # -- frames --------------------------------------------------------------------------

    def _feed(self, data: bytes) -> tuple[bool, bytes]:
        """Walks the frame headers in ``data``, charging each data frame; feeds the parser all
        of it, or up to the header of a frame that must wait (the rest is stashed), less the
        payload of each frame dropped for its size."""
        if self._partial:
            data, self._partial = self._partial + data, b""
        given: list[bytes] = []  # what the parser gets, when a frame was dropped on the way
        start = at = 0  # start: the first byte not yet in given
        end = len(data)
        while at < end:
            if self._drop_left:
                step = min(self._drop_left, end - at)
                self._drop_left -= step
                at = start = at + step
                continue
            if self._payload_left:
                step = min(self._payload_left, end - at)
                self._payload_left -= step
                at += step
                continue
            header = _header(data, at)
            if header is None:
                self._partial = data[at:]
                return self._give(given, data[start:at])
            size, opcode, fin, length = header
            if opcode not in _DATA_OPCODES:
                at += size
                self._payload_left = length
                continue
            if length > self._max_event_bytes and self._too_large(opcode, fin, length):
                # Refused from its header: the parser gets an empty frame of its kind instead.
                given += (data[start:at], bytes((0x80 | opcode, 0)))
                self._costs.append((0, 0, True))
                self._drop_left = length
                at = start = at + size
                continue
            at += size
            self._payload_left = length
            self._in_message = not fin
            # A header may claim any length; past the parser's cap the frame is refused anyway.
            length = min(length, self._max_frame_bytes)
            audio = length * 3 // 4 if length >= AUDIO_CHECK_BYTES else 0
            if not self._charge(length * COPIES, fin, audio):
                self._stash = data[at:]
                self._pause()
                return self._give(given, data[start:at])
        if not given and not start:  # the usual read: every byte of it goes to the parser
            return self._parser.feed_data(data)
        return self._give(given, data[start:])

    def _too_large(self, opcode: int, fin: bool, length: int) -> bool:
        """Whether a data frame is a whole message over the event cap that the parser would
        take (past its cap the parser refuses the frame itself, from the same header)."""
        return (
            fin
            and opcode != _CONTINUATION
            and not self._in_message
            and self._max_event_bytes < length <= self._max_frame_bytes
        )

    def _give(self, given: list[bytes], last: bytes) -> tuple[bool, bytes]:
        """Feeds the parser what it gets of this read."""
        if given:
            given.append(last)
            last = b"".join(given)
        return self._parser.feed_data(last)

    def _charge(self, cost: int, fin: bool, audio: int) -> bool:
        """Charges a data frame whose header was read; False when it waits (it is held)."""
        if audio and (wait_s := self._budget.audio_wait(self._key, audio)) > 0:
            self._held = (cost, fin, audio)
            self._timer = asyncio.get_running_loop().call_later(wait_s, self._retry)
            self._held_count.inc()
            return False
        if not self._budget.take(self._key, cost):
            self._held = (cost, fin, 0)
            self._budget.wait(self)
            self._held_count.inc()
            return False
        self._took(cost, fin)
        return True

    def _took(self, cost: int, fin: bool) -> None:
        """A frame of ``cost`` was charged: its message's record, once the message is whole."""
        self._message_cost += cost
        self._message_large += cost >= LARGE_COST
        if fin:
            self._costs.append((self._message_cost, self._message_large, False))
            self._message_cost = self._message_large = 0

    def _retry(self) -> None:
        """The audio allowance should take the held frame now: try it again."""
        self._timer = None
        if self._held is not None and not self._closed:
            cost, fin, audio = self._held
            self._held = None
            if self._charge(cost, fin, audio):
                self._go_on()

    def try_go(self) -> bool:
        """The budget has room again: charges the held frame if it fits now, and reads on."""
        if self._held is None or self._closed:
            return True
        cost, fin, _ = self._held
        if not self._budget.take(self._key, cost):
            return False
        self._held = None
        self._took(cost, fin)
        self._go_on()
        return True

    def _go_on(self) -> None:
        """Feeds what waited, and reads again unless another frame waits."""
        stash, self._stash = self._stash, b""
        eof, _ = self._feed(stash) if stash else (False, b"")
        if eof:
            self._protocol.close()
        elif self._held is None and self._transport is not None:
            self._transport.resume_reading()

    def _pause(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()


class MeteredSocket(web.WebSocketResponse):
    """A websocket whose frames pass a :class:`FrameMeter` from the first byte on.

    The meter takes the parser's place as the parser is set, before anything is fed to it:
    bytes a client sent before that wait in the connection, and go through the meter too.
    aiohttp has no public seam for this: the private parts it uses (``_post_start``, the
    handler's ``_payload_parser`` and ``_message_tail``) are pinned, with aiohttp's exact
    version, by ``tests/bridge/test_frame_meter_pins.py``.
    """

    def __init__(
        self,
        budget: FrameBudget,
        key: str,
        label: str,
        max_event_bytes: int = 1 << 62,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self._max_event_bytes = max_event_bytes  # a frame over it is refused from its header
        self._budget = budget
        self._key = key
        self._label = label  # the key's hashed label in metrics (none: not a key of ours)
        self.meter: FrameMeter | None = None

    def _post_start(self, request: BaseRequest, protocol: str | None, writer: Any) -> None:
        handler = request.protocol
        tail = getattr(handler, "_message_tail", b"")
        if tail:
            handler._message_tail = b""
        super()._post_start(request, protocol, writer)
        meter = FrameMeter(
            handler._payload_parser,
            handler,
            request.transport,
            self._budget,
            self._key,
            self._label,
            self._max_msg_size or 1 << 62,
            self._max_event_bytes,
        )
        handler._payload_parser = self.meter = meter
        if tail:
            handler.data_received(tail)


__all__ = ["FrameMeter", "MeteredSocket"]
