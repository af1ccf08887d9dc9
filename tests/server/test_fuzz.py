"""Random, mutated and malformed requests against a live server.

Whatever a client sends, the server answers with typed errors (in-band ``error`` events with a
code and a type, or a gRPC status on the stream), stays up, and leaves other sessions alone: a
bystander session keeps a numbered conversation going between examples and must see every one
of its answers, in order. The messages are built from the descriptors with extreme values in
every scalar (the ends of each integer range, huge, infinite and NaN doubles), Structs nested
and widened past the contract's bounds (and past what the decoder parses at all), and
Durations beyond their documented span.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor as _descriptor
from google.protobuf import duration_pb2
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import RunningServer, start_server
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import (
    MAX_DURATION_NANOS,
    MAX_DURATION_S,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_CHARS,
    MAX_STRUCT_DEPTH,
    MAX_STRUCT_VALUES,
    UINT32_MAX,
    UINT64_MAX,
)
from tests.serving import settings as server_settings

CODE = re.compile(r"^[a-z][a-z0-9_]*$")
# What a stream may end with when its first message is garbage or its bytes do not parse.
STREAM_STATUSES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
QUIET_S = 0.08
FD = _descriptor.FieldDescriptor


def _ends(low: int, high: int) -> st.SearchStrategy[int]:
    """Small values, the ends of the range, and anything between."""
    return st.one_of(st.integers(0, 8), st.sampled_from([low, high]), st.integers(low, high))


def _scalar(field: _descriptor.FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in (FD.TYPE_UINT64, FD.TYPE_UINT32):
        return _ends(0, UINT64_MAX if kind == FD.TYPE_UINT64 else UINT32_MAX)
    if kind in (FD.TYPE_INT64, FD.TYPE_INT32):
        bits = 63 if kind == FD.TYPE_INT64 else 31
        return _ends(-(2**bits), 2**bits - 1)
    if kind == FD.TYPE_DOUBLE:
        return st.one_of(st.floats(), st.sampled_from([1e308, -1e308, math.inf, -math.inf]))
    if kind == FD.TYPE_FLOAT:
        return st.floats(width=32)
    if kind == FD.TYPE_BOOL:
        return st.booleans()
    if kind == FD.TYPE_STRING:
        return st.text(max_size=40)
    if kind == FD.TYPE_BYTES:
        return st.binary(max_size=3000)
    if kind == FD.TYPE_ENUM:
        return st.integers(-3, 12)  # includes values the enum does not define
    raise AssertionError(f"no strategy for field type {kind}")


def nested_json(depth: int, through_lists: bool) -> dict[str, Any]:
    """A JSON object ``depth`` levels deep (the top object is level 1)."""
    value: Any = 1
    for level in range(depth - 1):
        value = [value] if through_lists and level % 2 else {"a": value}
    return {"a": value}


# Free-form objects around and past the bounds: the core refuses past MAX_STRUCT_DEPTH levels or
# MAX_STRUCT_VALUES values; past 32 levels the decoder refuses the whole message.
STRUCT_VALUES = st.one_of(
    st.builds(nested_json, st.integers(1, 200), st.booleans()),
    st.just({f"k{index}": index for index in range(MAX_STRUCT_VALUES + 1)}),
    st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.booleans(), st.floats())),
)
DURATIONS = st.tuples(
    _ends(-(2**63), 2**63 - 1), st.one_of(_ends(-(2**31), 2**31 - 1), st.just(MAX_DURATION_NANOS))
)


def _well_known(message: Message, field: _descriptor.FieldDescriptor, draw: st.DrawFn) -> None:
    """Fills a Struct or a Duration field in place (a deep Struct cannot be copied: copying
    parses it, and the decoder's depth limit refuses it)."""
    name = field.message_type.full_name
    if name == "google.protobuf.Struct" and not field.is_repeated:
        getattr(message, field.name).update(draw(STRUCT_VALUES))
    elif name == "google.protobuf.Duration" and not field.is_repeated:
        seconds, nanos = draw(DURATIONS)
        duration = getattr(message, field.name)
        duration.seconds, duration.nanos = seconds, nanos


def messages(desc: _descriptor.Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Any message of ``desc``'s type: random subsets of fields with random values."""
    cls = {m.DESCRIPTOR.full_name: m for m in _all_message_classes()}[desc.full_name]
    fields = [f for f in desc.fields if not (f.message_type and depth >= 3)]

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        message = cls()
        chosen = draw(st.lists(st.sampled_from(fields), max_size=4, unique=True)) if fields else []
        for field in chosen:
            if field.message_type is not None:
                if field.message_type.GetOptions().map_entry:
                    # The contract's maps are all string to string (metadata, trace context).
                    pairs = draw(st.dictionaries(st.text(max_size=70), st.text(), max_size=18))
                    getattr(message, field.name).update(pairs)
                    continue
                if field.message_type.full_name.startswith("google.protobuf."):
                    _well_known(message, field, draw)
                    continue
                values = draw(st.lists(messages(field.message_type, depth + 1), max_size=2))
                if field.is_repeated:
                    getattr(message, field.name).extend(values)
                elif values:
                    getattr(message, field.name).CopyFrom(values[0])
            elif field.is_repeated:
                getattr(message, field.name).extend(draw(st.lists(_scalar(field), max_size=3)))
            else:
                setattr(message, field.name, draw(_scalar(field)))
        return message

    return build()


def _all_message_classes() -> Iterator[type[Message]]:
    for name in dir(pb):
        value = getattr(pb, name)
        if isinstance(value, type) and issubclass(value, Message):
            yield value


REQUESTS = messages(pb.ConverseRequest.DESCRIPTOR)


class Live:
    """A server on its own event loop thread, plus a bystander session on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.running: RunningServer = self.run(start_server(server_settings()))
        self.channel = self.run(self._channel())
        self.stub = duplex_pb2_grpc.DuplexServiceStub(self.channel)
        self.bystander, self.bystander_seq = self.run(self._open_bystander()), 0

    def run(self, coroutine: Any, timeout: float = 30.0) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout)

    async def _channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.running.target)

    async def _open_bystander(self) -> grpc.aio.StreamStreamCall:
        call = self.stub.Converse()
        await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
        assert (await call.read()).WhichOneof("event") == "session_created"
        return call

    async def check_bystander(self) -> None:
        self.bystander_seq += 1
        await self.bystander.write(
            pb.ConverseRequest(client_seq=self.bystander_seq, heartbeat=pb.Heartbeat())
        )
        answer = await asyncio.wait_for(self.bystander.read(), 5)
        assert answer.WhichOneof("event") == "heartbeat_ack"
        assert answer.applied_client_seq == self.bystander_seq
        assert answer.seq == self.bystander_seq  # nothing else ever reached this session

    def close(self) -> None:
        self.run(self.channel.close())
        self.run(self.running.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        # An unclosed loop warns when the garbage collector finds it, inside whatever test runs
        # then, and the suite turns that warning into that test's failure.
        self.loop.close()


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    live = Live()
    yield live

    async def check() -> health_pb2.HealthCheckResponse:
        return await health_pb2_grpc.HealthStub(live.channel).Check(health_pb2.HealthCheckRequest())

    health = live.run(check())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    live.close()


async def _drain(call: grpc.aio.StreamStreamCall) -> list[pb.ConverseResponse]:
    """Reads until the stream goes quiet or ends; checks every event and the ending."""
    events = []
    try:
        while True:
            event = await asyncio.wait_for(call.read(), QUIET_S)
            if event is grpc.aio.EOF:
                break
            events.append(event)
    except TimeoutError:
        pass
    except grpc.aio.AioRpcError as ended:
        assert ended.code() in STREAM_STATUSES, ended
    for event in events:
        assert event.WhichOneof("event") is not None
        if event.WhichOneof("event") == "error":
            assert CODE.match(event.error.code), event.error
            assert event.error.type != pb.ERROR_TYPE_UNSPECIFIED
    return events


async def _fuzz_commands(live: Live, requests: list[pb.ConverseRequest]) -> None:
    call = live.stub.Converse()
    await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
    for request in requests:
        with _stream_may_end():
            await call.write(request)
    await _drain(call)
    call.cancel()
    await live.check_bystander()


async def _fuzz_first_message(live: Live, request: pb.ConverseRequest) -> None:
    call = live.stub.Converse()
    with _stream_may_end():
        await call.write(request)
    await _drain(call)
    call.cancel()
    await live.check_bystander()


async def _fuzz_raw(live: Live, payloads: list[bytes]) -> None:
    call = live.channel.stream_stream("/omni.duplex.v1.DuplexService/Converse")()
    for payload in payloads:
        with _stream_may_end():
            await call.write(payload)
    try:
        while await asyncio.wait_for(call.read(), QUIET_S) is not grpc.aio.EOF:
            pass
    except TimeoutError:
        pass
    except grpc.aio.AioRpcError as ended:
        assert ended.code() in STREAM_STATUSES, ended
    call.cancel()
    await live.check_bystander()


class _stream_may_end:
    """Writing to a stream the server already ended is fine in a fuzz test."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: object, tb: object) -> bool:
        return isinstance(error, grpc.aio.AioRpcError | asyncio.InvalidStateError)


FUZZ = settings(
    max_examples=70,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(requests=st.lists(REQUESTS, min_size=1, max_size=6))
def test_random_commands_get_typed_answers(live: Live, requests: list[pb.ConverseRequest]) -> None:
    live.run(_fuzz_commands(live, requests))


@FUZZ
@given(request=REQUESTS)
def test_random_first_messages_are_refused_or_served(
    live: Live, request: pb.ConverseRequest
) -> None:
    live.run(_fuzz_first_message(live, request))


VALID = pb.ConverseRequest(
    client_seq=1, append_input_audio=pb.AppendInputAudio(audio=bytes(960), sample_rate_hz=24000)
).SerializeToString()
OPEN = pb.ConverseRequest(open_session=pb.OpenSession()).SerializeToString()


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 6))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


@FUZZ
@given(
    payloads=st.lists(st.one_of(st.binary(max_size=200), mutated()), min_size=1, max_size=4),
    open_first=st.booleans(),
)
def test_raw_and_mutated_bytes_never_hurt_the_server(
    live: Live, payloads: list[bytes], open_first: bool
) -> None:
    # Without a session, the first message decides the stream's fate: send just that one, so
    # the status read back is the server's and not a client-side failure of later writes.
    live.run(_fuzz_raw(live, [OPEN, *payloads] if open_first else payloads[:1]))


def _deep_update(depth: int, through_lists: bool = False) -> pb.ConverseRequest:
    request = pb.ConverseRequest(client_seq=1)
    request.update_session.config.engine_options.update(nested_json(depth, through_lists))
    return request


def _metadata(pairs: dict[str, str]) -> pb.ConverseRequest:
    return pb.ConverseRequest(client_seq=1, create_response=pb.CreateResponse(metadata=pairs))


def _far_idle_timeout(seconds: int, nanos: int = 0) -> pb.ConverseRequest:
    config = pb.SessionConfig(idle_timeout=duration_pb2.Duration(seconds=seconds, nanos=nanos))
    return pb.ConverseRequest(client_seq=1, update_session=pb.UpdateSession(config=config))


async def _answered_in_band(live: Live, request: pb.ConverseRequest) -> pb.ErrorReport:
    """Sends one command on a new session; returns its error; the stream must go on."""
    call = live.stub.Converse()
    await call.write(pb.ConverseRequest(open_session=pb.OpenSession()))
    assert (await call.read()).WhichOneof("event") == "session_created"
    await call.write(request)
    answer = await asyncio.wait_for(call.read(), 5)
    await call.write(pb.ConverseRequest(heartbeat=pb.Heartbeat()))
    assert (await asyncio.wait_for(call.read(), 5)).WhichOneof("event") == "heartbeat_ack"
    call.cancel()
    await live.check_bystander()
    assert answer.WhichOneof("event") == "error", answer
    return answer.error


@pytest.mark.parametrize(
    ("request_", "code", "param"),
    [
        (_deep_update(MAX_STRUCT_DEPTH + 1), "bad_event", "engine_options"),
        (_deep_update(MAX_STRUCT_DEPTH + 1, through_lists=True), "bad_event", "engine_options"),
        (_deep_update(32), "bad_event", "engine_options"),
        # Past what the decoder parses: the command cannot be read, but it is answered.
        (_deep_update(33), "invalid_message", ""),
        (_deep_update(200), "invalid_message", ""),
        (_metadata({f"k{i}": "v" for i in range(MAX_METADATA_PAIRS + 1)}), "bad_event", "metadata"),
        (_metadata({"k": "v" * (MAX_METADATA_VALUE_CHARS + 1)}), "bad_event", "metadata"),
        (_far_idle_timeout(MAX_DURATION_S + 1), "invalid_session_config", "idle_timeout"),
        (_far_idle_timeout(2**63 - 1), "invalid_session_config", "idle_timeout"),
        (_far_idle_timeout(5, -1), "invalid_session_config", "idle_timeout"),
    ],
    ids=[
        "struct-17",
        "struct-17-lists",
        "struct-32",
        "struct-33",
        "struct-200",
        "metadata-pairs",
        "metadata-value",
        "duration-past-span",
        "duration-int64-max",
        "duration-mixed-signs",
    ],
)
def test_structs_and_durations_past_the_bounds_are_answered_in_band(
    live: Live, request_: pb.ConverseRequest, code: str, param: str
) -> None:
    error = live.run(_answered_in_band(live, request_))
    assert (error.code, error.param) == (code, param), error
