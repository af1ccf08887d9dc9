"""ConverseMany with API keys, on a real server and port: the call presents a key as any call
does (a call without one is refused before a message is read), and each stream presents its
own again (a stream with a wrong key is refused alone, the others on its call go on)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from omni_grpc.client.channel import ChannelSettings
from omni_grpc.client.multiplex import METHOD, MultiplexedConnection, MultiplexedStream
from omni_grpc.server.app import RunningServer
from omni_grpc.server.settings import ServerSettings
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_metadata
from omni_grpc.wire.stream_end import StreamBroken
from tests.serving import serving, settings

OPEN = pb.ConverseRequest(open_session=pb.OpenSession())
CLOSE = pb.ConverseRequest(client_seq=1, close_session=pb.CloseSession())
KEYS = ("k1", "k2")


def _open_batch(*streams: tuple[int, str]) -> pb.ConverseManyRequest:
    """One batch opening a session on each (stream id, the stream's own key)."""
    return pb.ConverseManyRequest(
        requests=[
            pb.StreamRequest(stream_id=stream_id, request=OPEN, api_key=key)
            for stream_id, key in streams
        ]
    )


def _raw_call(channel: grpc.aio.Channel, call_key: str) -> grpc.aio.StreamStreamCall:
    method = channel.stream_stream(
        METHOD,
        request_serializer=pb.ConverseManyRequest.SerializeToString,
        response_deserializer=pb.ConverseManyResponse.FromString,
    )
    return method(metadata=bearer_metadata(call_key))  # type: ignore[no-any-return]


async def _events(call: grpc.aio.StreamStreamCall, count: int) -> list[pb.StreamEvent]:
    events: list[pb.StreamEvent] = []
    while len(events) < count:
        reply = await asyncio.wait_for(call.read(), 10)
        assert reply is not grpc.aio.EOF  # type: ignore[attr-defined]
        events.extend(reply.events)
    return events


@pytest.mark.parametrize("call_key", ["", "wrong"])
async def test_a_call_without_a_valid_key_is_refused_before_any_stream_opens(
    call_key: str,
) -> None:
    async with (
        serving(settings(api_keys=KEYS)) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        call = _raw_call(channel, call_key)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            # Its streams present valid keys: the call's own is what is missing. A call refused
            # at once may fail the write already.
            await call.write(_open_batch((1, "k1"), (2, "k2")))
            await asyncio.wait_for(call.read(), 10)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert len(running.registry) == 0  # nothing was read, nothing opened
        assert running.local is not None and running.local.streams == 0


async def test_a_keyed_call_carries_streams_each_checked_by_its_own_key() -> None:
    async with (
        serving(settings(api_keys=KEYS)) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        call = _raw_call(channel, "k1")
        await call.write(_open_batch((1, "k1"), (2, "wrong"), (3, "k2")))
        events = {event.stream_id: event for event in await _events(call, 3)}
        assert events[1].event.WhichOneof("event") == "session_created"
        assert events[2].end.status_code == grpc.StatusCode.UNAUTHENTICATED.value[0]
        # A stream of another key rides a call of k1 and its session is bound to k2.
        assert events[3].event.WhichOneof("event") == "session_created"
        assert len(running.registry) == 2
        call.cancel()


@pytest.fixture
def server_settings() -> ServerSettings:
    """The shared ``server`` takes these keys."""
    return settings(api_keys=KEYS)


async def _session_closes(connection: MultiplexedConnection, key: str) -> None:
    stream = connection.converse(bearer_metadata(key))
    await stream.write(OPEN)
    created = await _read(stream)
    assert created is not None and created.WhichOneof("event") == "session_created"
    await stream.write(CLOSE)
    kinds = []
    while (event := await _read(stream)) is not None:
        kinds.append(event.WhichOneof("event"))
    assert kinds[-1] == "session_closed"


async def _read(stream: MultiplexedStream) -> pb.ConverseResponse | None:
    return await asyncio.wait_for(stream.read(), 10)


async def test_the_bridge_link_keys_its_calls_and_a_wrong_key_fails_alone(
    server: RunningServer,
) -> None:
    connection = MultiplexedConnection(ChannelSettings(target=server.target), calls=1)
    try:
        good = connection.converse(bearer_metadata("k1"))
        await good.write(OPEN)
        assert await _read(good) is not None
        # A wrong key gets a call of its own, refused whole; the good stream's call goes on.
        wrong = connection.converse(bearer_metadata("wrong"))
        await wrong.write(OPEN)
        with pytest.raises(StreamBroken) as refused:
            await _read(wrong)
        assert refused.value.status is grpc.StatusCode.UNAUTHENTICATED
        await good.write(CLOSE)
        kinds = []
        while (event := await _read(good)) is not None:
            kinds.append(event.WhichOneof("event"))
        assert kinds[-1] == "session_closed"
        await asyncio.gather(_session_closes(connection, "k1"), _session_closes(connection, "k2"))
    finally:
        await connection.close()
