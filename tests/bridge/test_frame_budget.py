"""The frame meter and the budget it charges: frames counted from their headers, waiting unread
when they do not fit, going in order when room comes back; a real socket's frames too."""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import orjson
import pytest

from bridge.app import start_bridge
from bridge.frame_budget import COPIES, LARGE_FRAME_BYTES, FrameBudget, OwnLedger, own_budget
from bridge.frame_meter import FrameMeter
from bridge.options import MAX_EVENT_BYTES, BridgeOptions
from tests.bridge.testkit import WITH_EXTENSIONS, service_settings
from tests.serving import serving

TEXT, BINARY, CONTINUATION, PING = 0x1, 0x2, 0x0, 0x9
NO_TURN_DETECTION = {  # the input is held, as a flood's is
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}


def frame(payload: bytes, opcode: int = TEXT, *, fin: bool = True) -> bytes:
    """A client frame (masked, as clients send them) with ``payload``."""
    first = (0x80 if fin else 0) | opcode
    size = len(payload)
    if size < 126:
        header = struct.pack("!BB", first, 0x80 | size)
    elif size < 1 << 16:
        header = struct.pack("!BBH", first, 0x80 | 126, size)
    else:
        header = struct.pack("!BBQ", first, 0x80 | 127, size)
    return header + b"\x01\x02\x03\x04" + payload  # the mask's value does not matter here


class Parser:
    """What aiohttp's parser would be fed."""

    def __init__(self) -> None:
        self.fed = b""

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.fed += data
        return False, b""

    def feed_eof(self) -> None:
        pass


class Transport:
    def __init__(self) -> None:
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def meter(budget: FrameBudget, key: str = "a", **caps: int) -> tuple[FrameMeter, Parser, Transport]:
    parser, transport = Parser(), Transport()
    return FrameMeter(parser, None, transport, budget, key, **caps), parser, transport


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_frames_split_anywhere_are_charged_from_their_headers(step: int) -> None:
    budget = FrameBudget(OwnLedger(10**9))
    metered, parser, _ = meter(budget)
    stream = (
        frame(b"x" * 10)
        + frame(b"", PING)  # control frames cost nothing
        + frame(b"y" * 300, fin=False)
        + frame(b"z" * 70_000, CONTINUATION)
    )
    for at in range(0, len(stream), step):
        metered.feed_data(stream[at : at + step])
    assert parser.fed == stream
    assert budget.in_flight == (10 + 300 + 70_000) * COPIES
    metered.handled()  # the first message
    assert budget.in_flight == (300 + 70_000) * COPIES
    metered.handled()  # the second, of two frames
    assert budget.in_flight == 0


def test_a_frame_that_does_not_fit_waits_unread_and_goes_when_room_comes() -> None:
    budget = FrameBudget(OwnLedger(1000 * COPIES))
    first, _, _ = meter(budget)
    second, second_parser, transport = meter(budget)
    first.feed_data(frame(b"x" * 600))  # nothing in flight: it goes, whatever its size
    waiting = frame(b"y" * 600)
    second.feed_data(waiting[:100])
    header = len(waiting) - 600
    assert transport.paused and second_parser.fed == waiting[:header]  # the header only
    second.feed_data(waiting[100:])  # more bytes while it waits are kept, not parsed
    assert second_parser.fed == waiting[:header] and transport.paused
    first.handled()
    assert second_parser.fed == waiting and not transport.paused
    assert budget.in_flight == 600 * COPIES


def test_a_key_over_its_share_waits_behind_the_other_keys() -> None:
    ledgers = {"a": OwnLedger(100 * COPIES), "b": OwnLedger(100 * COPIES)}
    budget = FrameBudget(OwnLedger(1000 * COPIES), ledgers.get)
    a1, _, _ = meter(budget, "a")
    a2, _, a2_transport = meter(budget, "a")
    b1, _, b1_transport = meter(budget, "b")
    a1.feed_data(frame(b"x" * 90))
    a2.feed_data(frame(b"x" * 90))  # key a would pass its share: it waits
    b1.feed_data(frame(b"x" * 90))  # key b has room: it goes, ahead of a's
    assert a2_transport.paused and not b1_transport.paused
    b1.handled()
    assert a2_transport.paused  # b's room is not a's
    a1.handled()
    assert not a2_transport.paused


def test_input_held_counts_and_a_frame_passes_when_nothing_is_in_flight() -> None:
    server = OwnLedger(1000)
    server.held = 1000  # the sessions' input fills the budget
    budget = FrameBudget(server)
    metered, _, transport = meter(budget)
    metered.feed_data(frame(b"x" * 10))
    assert not transport.paused  # a commit must still get through
    second, _, second_transport = meter(budget)
    second.feed_data(frame(b"x" * 10))
    assert second_transport.paused


def test_closing_gives_everything_back_and_stops_waiting() -> None:
    budget = FrameBudget(OwnLedger(100 * COPIES))
    first, _, _ = meter(budget)
    second, _, _ = meter(budget)
    first.feed_data(frame(b"x" * 90) + frame(b"x" * 10, fin=False))
    second.feed_data(frame(b"y" * 90))
    second.close()
    first.close()
    assert budget.in_flight == 0


async def test_a_large_frame_waits_for_its_keys_audio_allowance() -> None:
    waits = [0.05, 0.0]
    budget = FrameBudget(OwnLedger(10**9), audio_wait=lambda key, size: waits.pop(0))
    metered, parser, transport = meter(budget)
    big = frame(b"x" * 70_000)
    metered.feed_data(big)
    assert transport.paused and len(parser.fed) == 14
    await asyncio.sleep(0.2)
    assert parser.fed == big and not transport.paused
    metered.feed_data(frame(b"x" * 100))  # small frames are not asked
    assert not waits


@asynccontextmanager
async def bridge_url(budget: FrameBudget) -> AsyncIterator[str]:
    """A bridge whose frames are charged to ``budget``, in front of a loopback service; the
    URL of its Realtime socket (extensions on)."""
    async with serving(service_settings()) as service:
        runner, port = await start_bridge(
            service.target, BridgeOptions(port=0), local=service.local, frames=budget
        )
        try:
            yield f"http://127.0.0.1:{port}/v1/realtime?{WITH_EXTENSIONS}"
        finally:
            await runner.cleanup()


def test_a_bridge_alone_shares_its_budget_between_two_keys_or_more() -> None:
    shared = BridgeOptions(api_keys=("a", "b"), memory_budget_bytes=1000, key_memory_share=0.25)
    budget = own_budget(1000, ("a", "b"), shared.tenant_policy())
    ledger = budget._key_ledger("a")
    assert ledger is not None and ledger.capacity_bytes == 250
    alone = BridgeOptions(api_keys=("a",), memory_budget_bytes=1000, key_memory_share=0.25)
    assert own_budget(1000, ("a",), alone.tenant_policy())._key_ledger("a") is None


async def test_a_real_socket_charges_its_frames_until_their_commands_left() -> None:
    budget = FrameBudget(OwnLedger(10**9))
    async with (
        bridge_url(budget) as url,
        aiohttp.ClientSession() as http,
        http.ws_connect(url) as ws,
    ):
        await asyncio.wait_for(ws.receive(), 10)  # session.created
        heartbeat = '{"type":"session.heartbeat"}'
        await ws.send_str(heartbeat)
        answer = await asyncio.wait_for(ws.receive(), 10)
        assert answer.json()["type"] == "session.heartbeat_ack"
        assert budget.peak >= len(heartbeat) * COPIES  # it was charged...
        assert budget.in_flight == 0  # ...until its command left


def test_a_header_claiming_more_than_the_parser_takes_is_charged_what_it_takes() -> None:
    budget = FrameBudget(OwnLedger(10**9))
    claim = struct.pack("!BBQ", 0x81, 0x80 | 127, 1 << 40) + b"\x01\x02\x03\x04"
    metered = FrameMeter(Parser(), None, Transport(), budget, "a", max_frame_bytes=1000)
    metered.feed_data(claim)
    assert budget.in_flight == 1000 * COPIES


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_a_frame_over_the_event_cap_is_dropped_from_its_header(step: int) -> None:
    budget = FrameBudget(OwnLedger(10**9))
    metered, parser, transport = meter(budget, max_event_bytes=100, max_frame_bytes=1000)
    small, ping = frame(b"s" * 10), frame(b"", PING)
    stream = small + frame(b"x" * 500) + ping + frame(b"y" * 101, BINARY) + small
    for at in range(0, len(stream), step):
        metered.feed_data(stream[at : at + step])
    # The parser gets each dropped frame as an empty, unmasked frame of its kind; the rest whole.
    empty_text, empty_binary = bytes((0x80 | TEXT, 0)), bytes((0x80 | BINARY, 0))
    assert parser.fed == small + empty_text + ping + empty_binary + small
    assert not transport.paused
    assert budget.in_flight == 20 * COPIES  # the dropped frames cost nothing
    dropped = []
    for _ in range(4):  # one per message, in order, as the relay hands them on
        dropped.append(metered.dropped())
        metered.handled()
    assert dropped == [False, True, True, False]
    assert budget.in_flight == 0 and not metered.dropped()


def test_a_message_of_several_frames_and_a_frame_past_the_parsers_cap_are_not_dropped() -> None:
    budget = FrameBudget(OwnLedger(10**9))
    metered, parser, _ = meter(budget, max_event_bytes=100, max_frame_bytes=1000)
    # A message's later frames are the parser's to join (and the dialect's to refuse by size).
    fragmented = frame(b"x" * 50, fin=False) + frame(b"y" * 150, CONTINUATION)
    # Past what the parser takes, it refuses the frame itself from the same header (1009).
    claim = struct.pack("!BBQ", 0x81, 0x80 | 127, 5000) + b"\x01\x02\x03\x04"
    metered.feed_data(fragmented + claim)
    assert parser.fed == fragmented + claim
    assert not metered.dropped()


async def test_a_real_socket_is_answered_event_too_large_and_reads_on() -> None:
    budget = FrameBudget(OwnLedger(10**9))
    async with (
        bridge_url(budget) as url,
        aiohttp.ClientSession() as http,
        http.ws_connect(url) as ws,
    ):
        await asyncio.wait_for(ws.receive(), 10)  # session.created
        audio = "A" * (MAX_EVENT_BYTES + 4)
        await ws.send_str('{"type":"input_audio_buffer.append","audio":"' + audio + '"}')
        await ws.send_str('{"type":"session.heartbeat"}')
        error = (await asyncio.wait_for(ws.receive(), 30)).json()
        assert error["type"] == "error"
        assert error["error"]["code"] == "event_too_large"
        answer = await asyncio.wait_for(ws.receive(), 10)
        assert answer.json()["type"] == "session.heartbeat_ack"  # the socket reads on
        assert budget.peak < MAX_EVENT_BYTES  # the frame was never charged nor held


def test_a_keys_large_frames_go_one_at_a_time_and_other_keys_between() -> None:
    budget = FrameBudget(OwnLedger(10**12))
    large = frame(b"x" * LARGE_FRAME_BYTES)
    a1, _, _ = meter(budget, "a")
    a2, a2_parser, a2_transport = meter(budget, "a")
    b1, _, b1_transport = meter(budget, "b")
    a1.feed_data(large)
    a2.feed_data(large)  # a's second large frame waits, unread, for its first
    b1.feed_data(large)  # b's goes: the rule is per key
    a2.feed_data(frame(b"y" * 10))  # kept behind the waiting frame, in order
    assert a2_transport.paused and len(a2_parser.fed) == len(large) - LARGE_FRAME_BYTES
    assert not b1_transport.paused
    small, _, small_transport = meter(budget, "a")
    small.feed_data(frame(b"z" * 10))  # a's small frames are not held by its large one
    assert not small_transport.paused
    a1.handled()
    assert not a2_transport.paused and a2_parser.fed == large + frame(b"y" * 10)
    a2.close()
    b1.handled()
    small.handled()
    assert budget.in_flight == 0


async def test_large_appends_of_one_key_on_two_sockets_are_all_applied() -> None:
    budget = FrameBudget(OwnLedger(10**12))
    audio = base64.b64encode(b"\x00\x08" * (LARGE_FRAME_BYTES // 2)).decode()
    append = '{"type":"input_audio_buffer.append","audio":"' + audio + '"}'
    async with (
        bridge_url(budget) as url,
        aiohttp.ClientSession() as http,
        http.ws_connect(url) as first,
        http.ws_connect(url) as second,
    ):
        for ws in (first, second):
            await asyncio.wait_for(ws.receive(), 10)  # session.created
            await ws.send_str(orjson.dumps(NO_TURN_DETECTION).decode())
        for ws in (first, second):  # the same key's large frames, together
            await ws.send_str(append)
            await ws.send_str(append)
            await ws.send_str('{"type":"session.heartbeat"}')
        for ws in (first, second):  # each waited its turn; none was refused
            while (event := (await asyncio.wait_for(ws.receive(), 30)).json())[
                "type"
            ] != "session.heartbeat_ack":
                assert event["type"] != "error", event
        assert budget.in_flight == 0
