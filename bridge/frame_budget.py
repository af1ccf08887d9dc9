"""The memory budget before the bytes are decoded: each client frame counted from its length.

aiohttp reads a websocket frame whole before a relay sees it, and a relay then parses its JSON
and decodes its base64: a 15 MiB append costs about four times its length before its command
leaves for the service. Counted only after that, sixty sockets of one key once took a server
past three times its budget. So a :class:`FrameMeter` stands between each socket's connection
and aiohttp's frame parser and reads only the frame headers: each data frame is charged
``COPIES`` times its length against a :class:`FrameBudget` from its header, before its payload
is read, and the charge is given back when the relay has handed the frame's command on.

A frame that does not fit waits with the rest of its bytes unread, and the socket's reading
pauses (backpressure: its sender meets TCP's flow control; nothing is cut). A frame does not
fit when its key already has frames in flight and its share of the budget would be passed, or
when frames are in flight at all and the server's budget would be; so one frame always passes
when nothing is in flight (no wait on input only its own socket's commands can free), and the
server holds at most its budget plus one frame. Waiting frames are taken in the order they
came, each when its key and the server have room: a key over its share waits behind the others.
With ``audio_wait`` (a service in the same process), a large frame also waits until its key's
audio allowance would take the audio its length can hold, instead of being parsed and refused.

A frame that alone is over the event cap (``max_event_bytes``, and within what the parser
takes) is refused from its header: its payload is dropped as it arrives, never buffered, and
the parser gets an empty frame of its kind in its place, which the relay answers
``event_too_large`` (:meth:`FrameMeter.dropped`). Read whole, such a frame cost the loop tens of
milliseconds in one slice (aiohttp joins, unmasks and copies it when its last byte comes), which
every other session on the loop waited behind, only to be refused for its length.

A large frame (``LARGE_FRAME_BYTES`` and up) also waits while its key has another large frame
in flight: when its last byte comes, aiohttp joins and unmasks it, and the relay parses and
decodes it, each in one slice of the loop that every other session waits behind (tens of
milliseconds for a few MiB). Taken one at a time per key, a key's large frames cannot pile
those slices up in one pass of the loop; another key's frames go between them.

The budget is the service's own when the bridge runs in its process (the same ledgers its
sessions' input is held in); a bridge alone has one of its own (``memory_budget_bytes``). When
a flood has gone through and nothing is in flight, ``on_drained`` runs: the launcher's hands the
free pages of the heap back to the system.
"""

from __future__ import annotations

import asyncio
import struct
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web
from aiohttp.web_request import BaseRequest

from bridge.metrics import FRAMES_HELD

# What a frame costs, in multiples of its length: the frame, the parsed JSON's string, the
# decoded audio and the command's copy of it (the last two three quarters each, base64's).
COPIES = 4
# Frames from this length up are checked against their key's audio allowance first.
AUDIO_CHECK_BYTES = 64 * 1024
# Frames from this length up go one at a time per key (a frame's loop slices grow with it).
LARGE_FRAME_BYTES = 1024 * 1024
_LARGE_COST = LARGE_FRAME_BYTES * COPIES
# Once frames of this much cost went through and none is in flight, ``on_drained`` runs (the
# launcher's: the allocator gives the free pages of the flood back to the system).
DRAINED_AFTER_BYTES = 64 * 1024 * 1024
_CONTINUATION = 0x0
_DATA_OPCODES = frozenset({_CONTINUATION, 0x1, 0x2})  # continuation, text, binary


class Ledger(Protocol):
    """Bytes held against a capacity (the service's MemoryBudget has this shape)."""

    capacity_bytes: int
    held: int


class OwnLedger:
    """A ledger of a bridge's own."""

    __slots__ = ("capacity_bytes", "held")

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.held = 0


def own_budget(
    capacity_bytes: int,
    keys: tuple[str, ...],
    key_share: float,
    on_drained: Callable[[], None] | None = None,
) -> FrameBudget:
    """A bridge's own budget, each of two keys or more holding at most ``key_share`` of it."""
    ledgers = {key: OwnLedger(int(capacity_bytes * key_share)) for key in keys}
    key_ledger = ledgers.get if len(keys) > 1 else _none
    return FrameBudget(OwnLedger(capacity_bytes), key_ledger, on_drained=on_drained)


def _none(key: str) -> Ledger | None:
    return None


class FrameBudget:
    """Frames in flight, charged to the server's ledger and to their key's (see the module)."""

    def __init__(
        self,
        server: Ledger,
        key_ledger: Callable[[str], Ledger | None] = _none,
        audio_wait: Callable[[str, int], float] | None = None,
        on_drained: Callable[[], None] | None = None,
    ) -> None:
        self.server = server
        self._on_drained = on_drained
        self._since_drained = 0  # the cost of the frames since on_drained last ran
        self._key_ledger = key_ledger
        self._audio_wait = audio_wait  # seconds until the key's audio allowance takes the bytes
        self.in_flight = 0  # what the frames in flight cost, next to what the ledgers hold
        self.peak = 0  # the most the ledger and the frames ever came to together
        self._by_key: Counter[str] = Counter()
        self._large_by_key: Counter[str] = Counter()  # large frames in flight, per key
        self._waiting: deque[FrameMeter] = deque()

    def take(self, key: str, cost: int) -> bool:
        """Charges a frame of ``cost``; False (nothing charged) when it must wait."""
        large = cost >= _LARGE_COST
        if large and self._large_by_key[key]:
            return False
        in_flight, by_key = self.in_flight, self._by_key[key]
        ledger = self._key_ledger(key)
        if by_key and ledger is not None and ledger.held + by_key + cost > ledger.capacity_bytes:
            return False
        server = self.server
        if in_flight and server.held + in_flight + cost > server.capacity_bytes:
            return False
        self.in_flight += cost
        self._by_key[key] += cost
        if large:
            self._large_by_key[key] += 1
        self._since_drained += cost
        self.peak = max(self.peak, server.held + self.in_flight)
        return True

    def give(self, key: str, cost: int, large: int = 0) -> None:
        """Gives the charge of frames back (``large`` of them large), and lets the frames that
        now fit go, in order."""
        if not cost:
            return
        self.in_flight -= cost
        self._by_key[key] -= cost
        if not self._by_key[key]:
            del self._by_key[key]
        if large:
            self._large_by_key[key] -= large
            if not self._large_by_key[key]:
                del self._large_by_key[key]
        for meter in list(self._waiting):
            if meter.try_go():
                self._waiting.remove(meter)
        if not self.in_flight and self._since_drained >= DRAINED_AFTER_BYTES:
            self._since_drained = 0
            if self._on_drained is not None:
                self._on_drained()

    def audio_wait(self, key: str, audio_bytes: int) -> float:
        """Seconds until ``key``'s audio allowance would take ``audio_bytes`` (0: now)."""
        return self._audio_wait(key, audio_bytes) if self._audio_wait is not None else 0.0

    def wait(self, meter: FrameMeter) -> None:
        self._waiting.append(meter)

    def stop_waiting(self, meter: FrameMeter) -> None:
        if meter in self._waiting:
            self._waiting.remove(meter)


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
        self._message_large = 0  # how many of them are large (bridge.frame_budget)
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
            if self._too_large(opcode, fin, length):
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
        self._message_large += cost >= _LARGE_COST
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


__all__ = [
    "COPIES",
    "LARGE_FRAME_BYTES",
    "FrameBudget",
    "FrameMeter",
    "Ledger",
    "MeteredSocket",
    "OwnLedger",
    "own_budget",
]
