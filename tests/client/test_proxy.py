"""The chaos proxy itself, against a plain echo server: it forwards, and it cuts as told."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.client.proxy import ChaosProxy


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(4096):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


_WRITERS: list[asyncio.StreamWriter] = []


@pytest.fixture
async def proxy() -> AsyncIterator[ChaosProxy]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with ChaosProxy("127.0.0.1", port, seed=11) as chaos:
        yield chaos
    for writer in _WRITERS:
        writer.close()
    _WRITERS.clear()
    server.close()
    await server.wait_closed()


async def _connect(proxy: ChaosProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    _WRITERS.append(writer)
    return reader, writer


async def _read_to_end(reader: asyncio.StreamReader) -> bytes:
    """Everything until the connection ends, by close or by reset."""
    chunks = []
    try:
        while data := await asyncio.wait_for(reader.read(4096), 5):
            chunks.append(data)
    except ConnectionError:
        pass
    return b"".join(chunks)


async def test_forwards_both_ways_and_counts(proxy: ChaosProxy) -> None:
    reader, writer = await _connect(proxy)
    writer.write(b"hello proxy")
    assert await asyncio.wait_for(reader.readexactly(11), 5) == b"hello proxy"
    assert (proxy.stats.bytes_up, proxy.stats.bytes_down) == (11, 11)
    assert proxy.open_connections == 1


async def test_cut_all_resets_every_connection(proxy: ChaosProxy) -> None:
    pairs = [await _connect(proxy) for _ in range(3)]
    for reader, writer in pairs:
        writer.write(b"x")
        assert await asyncio.wait_for(reader.readexactly(1), 5) == b"x"
    assert proxy.cut_all() == 3
    for reader, _ in pairs:
        assert await _read_to_end(reader) == b""
    assert proxy.open_connections == 0 and proxy.stats.cuts == 3


async def test_cut_after_bytes_lets_exactly_n_through(proxy: ChaosProxy) -> None:
    reader, writer = await _connect(proxy)
    writer.write(b"a" * 10)
    await asyncio.wait_for(reader.readexactly(10), 5)
    proxy.cut_after_bytes(5)  # 5 more bytes, in any direction, then the cut
    writer.write(b"b" * 100)
    assert await _read_to_end(reader) == b""  # the 5 went up; nothing more came back
    assert proxy.stats.bytes_up == 15 and proxy.stats.bytes_down == 10
    # One shot: a new connection is not cut.
    reader, writer = await _connect(proxy)
    writer.write(b"c" * 50)
    assert await asyncio.wait_for(reader.readexactly(50), 5) == b"c" * 50


async def test_refuse_drops_new_connections_only(proxy: ChaosProxy) -> None:
    reader, writer = await _connect(proxy)
    proxy.refuse = True
    refused_reader, _ = await _connect(proxy)
    assert await _read_to_end(refused_reader) == b""
    writer.write(b"still up")
    assert await asyncio.wait_for(reader.readexactly(8), 5) == b"still up"
    assert proxy.stats.refused == 1


async def test_random_cuts_repeat_with_the_seed() -> None:
    async def budgets(seed: int) -> list[int]:
        chaos = ChaosProxy("127.0.0.1", 9, seed=seed)
        drawn = []
        for _ in range(5):
            chaos.cut_randomly(1000)
            assert chaos._budget is not None
            drawn.append(chaos._budget)
        return drawn

    assert await budgets(5) == await budgets(5)
    assert await budgets(5) != await budgets(6)


async def test_random_byte_cuts_keep_cutting(proxy: ChaosProxy) -> None:
    proxy.cut_randomly(200)
    for _ in range(3):
        reader, writer = await _connect(proxy)
        writer.write(b"z" * 5000)
        received = await _read_to_end(reader)
        assert len(received) < 5000
    assert proxy.stats.cuts >= 3
    proxy.cut_randomly(None)
    reader, writer = await _connect(proxy)
    writer.write(b"z" * 5000)
    assert await asyncio.wait_for(reader.readexactly(5000), 5) == b"z" * 5000


async def test_timed_random_cuts(proxy: ChaosProxy) -> None:
    proxy.start_random_cuts(0.02, 0.05)
    reader, _ = await _connect(proxy)
    assert await _read_to_end(reader) == b""
    await proxy.stop_random_cuts()
    assert proxy.stats.cuts >= 1
    with pytest.raises(ValueError):
        proxy.start_random_cuts(0.5, 0.1)


async def test_cut_after_bytes_can_count_one_direction(proxy: ChaosProxy) -> None:
    reader, writer = await _connect(proxy)
    proxy.cut_after_bytes(3, direction="down")
    writer.write(b"abcdef")  # six bytes go up uncounted; three come back, then the cut
    assert await _read_to_end(reader) == b"abc"
    assert proxy.stats.bytes_up == 6 and proxy.stats.bytes_down == 3
    with pytest.raises(ValueError):
        proxy.cut_after_bytes(1, direction="sideways")


async def test_stall_holds_bytes_until_unstalled(proxy: ChaosProxy) -> None:
    reader, writer = await _connect(proxy)
    proxy.stall("down")
    writer.write(b"held")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(4), 0.2)
    assert proxy.stats.bytes_up == 4 and proxy.stats.bytes_down == 0
    proxy.unstall("down")
    assert await asyncio.wait_for(reader.readexactly(4), 5) == b"held"
    with pytest.raises(ValueError):
        proxy.stall("sideways")
