"""A gRPC client that stops reading: its stream ends with a typed status, its session resumes.

The client asks for a long answer and does not read it. The server's send queue is made small
so that it fills at once; the path is the real one: the host cuts the stream, the servicer ends
the call with RESOURCE_EXHAUSTED (``slow_consumer``) and the session waits, detached, for a
resume that replays exactly what the client missed.
"""

from __future__ import annotations

import grpc
import pytest

from omni_grpc.core import State
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server import send_queue
from omni_grpc.wire import pb
from omni_grpc.wire.stream_end import StreamBroken
from tests.server.streams import open_stream, pcm16, read, resume_request
from tests.serving import eventually, serving, settings

DEFAULT_QUEUE = send_queue.SEND_QUEUE_DEPTH
SMALL_QUEUE = 32  # events; with the default (2048) the test would only take longer
SPEECH_S = 30  # of input: its answer is 300 output chunks of 100 ms, far past the queue


async def test_a_client_that_stops_reading_gets_slow_consumer_and_resumes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(send_queue, "SEND_QUEUE_DEPTH", SMALL_QUEUE)
    async with (
        serving(settings()) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        call, created = await open_stream(stub)
        [session] = running.registry
        chunk = pcm16(5000)
        appends = SPEECH_S // 5
        for seq in range(1, appends + 1):
            await call.write(
                pb.ConverseRequest(
                    client_seq=seq, append_input_audio=pb.AppendInputAudio(audio=chunk)
                )
            )
        await call.write(
            pb.ConverseRequest(client_seq=appends + 1, commit_input_audio=pb.CommitInputAudio())
        )
        # The client reads nothing while the answer streams: the server cuts the stream.
        await eventually(lambda: session.state is State.DETACHED)

        # Reading again, the client gets what the transport held, then the typed status.
        received = []
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            while True:
                received.append(await read(call))
        broken = StreamBroken.from_error(ended.value)
        assert broken.status is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert broken.code == "slow_consumer"
        assert len(received) <= SMALL_QUEUE + 1  # not the answer's hundreds of events
        last_seq = received[-1].seq

        # The session resumes and replays exactly what the client missed (with the usual
        # queue: a replay is queued at once, and the answer's hundreds of events fill it).
        monkeypatch.setattr(send_queue, "SEND_QUEUE_DEPTH", DEFAULT_QUEUE)
        again = stub.Converse()
        await again.write(resume_request(created, last_seq))
        resumed = await read(again)
        assert resumed.WhichOneof("event") == "session_resumed"
        assert resumed.applied_client_seq == appends + 1
        replay = [await read(again) for _ in range(resumed.session_resumed.replayed_events)]
        assert replay, "the client missed most of the answer"
        assert [event.seq for event in replay] == list(range(last_seq + 1, replay[-1].seq + 1))
        rest = await read_rest_of_answer(again, replay)
        assert rest[-1].WhichOneof("event") == "response_done"
        again.cancel()


async def read_rest_of_answer(
    call: grpc.aio.StreamStreamCall, events: list[pb.ConverseResponse]
) -> list[pb.ConverseResponse]:
    """The events up to the answer's response_done (which the replay may already hold)."""
    events = list(events)
    while events[-1].WhichOneof("event") != "response_done":
        events.append(await read(call))
    return events
