"""What a ConverseMany client sends faster than its session reads, against a real server and
port: each stream's unread requests are bounded (by count and by bytes), a stream past its
bound is cut as rate-limited, its session resumes, and the other stream on the call goes on.

A Converse call's client is held back by gRPC's flow control when its session pauses for a
rate limit; one stream of a shared call cannot be, so the server bounds what it holds for it.
The server runs on a :class:`~tests.serving.FakeClock`: no bucket refills, so a flooded
session pauses at every command it refuses and its requests pile up.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from omni_grpc.client.multiplex import METHOD
from omni_grpc.core import Limits, State
from omni_grpc.server import multiplex
from omni_grpc.wire import pb
from tests.server.streams import pcm16
from tests.serving import FakeClock, eventually, serving, settings

# A bucket of 20 commands that refills at one a second: past it, each refusal pauses the session
# for a whole second (of real time: the server sleeps out the hint), far longer than the client
# takes to send the rest, however busy the machine.
LIMITS = Limits(disconnect_grace_s=5.0, session_commands_per_s=1.0, rate_burst_s=20.0)
OPEN = pb.ConverseRequest(open_session=pb.OpenSession())
HEARTBEAT = pb.ConverseRequest(heartbeat=pb.Heartbeat())  # its ack says what was applied
FLOODER, BYSTANDER, RESUMED = 1, 2, 3


def _append(seq: int, ms: int) -> pb.ConverseRequest:
    return pb.ConverseRequest(
        client_seq=seq, append_input_audio=pb.AppendInputAudio(audio=pcm16(ms))
    )


def _batch(stream_id: int, *requests: pb.ConverseRequest) -> pb.ConverseManyRequest:
    return pb.ConverseManyRequest(
        requests=[pb.StreamRequest(stream_id=stream_id, request=r) for r in requests]
    )


async def _next(call: grpc.aio.StreamStreamCall, stream_id: int, wanted: str) -> pb.StreamEvent:
    """Reads the call until ``stream_id``'s event of kind ``wanted`` (or ``end``)."""
    while True:
        reply = await asyncio.wait_for(call.read(), 10)
        assert reply is not grpc.aio.EOF  # type: ignore[attr-defined]
        for event in reply.events:
            if event.stream_id != stream_id:
                continue
            kind = "end" if event.HasField("end") else event.event.WhichOneof("event")
            if kind in (wanted, "end"):
                return event


@pytest.mark.parametrize(
    ("bound", "value", "appends", "ms"),
    [
        ("MAX_UNREAD_REQUESTS", 16, 60, 10),  # many small requests
        ("MAX_UNREAD_BYTES", 64 * 1024, 40, 200),  # a few large ones (9.6 kB each)
    ],
)
async def test_a_stream_sending_past_its_unread_bound_is_cut_and_the_call_goes_on(
    monkeypatch: pytest.MonkeyPatch, bound: str, value: int, appends: int, ms: int
) -> None:
    monkeypatch.setattr(multiplex, bound, value)
    clock = FakeClock()
    async with (
        serving(settings(limits=LIMITS), clock=clock) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        call = channel.stream_stream(
            METHOD,
            request_serializer=pb.ConverseManyRequest.SerializeToString,
            response_deserializer=pb.ConverseManyResponse.FromString,
        )()
        await call.write(_batch(FLOODER, OPEN))
        created = (await _next(call, FLOODER, "session_created")).event
        await call.write(_batch(BYSTANDER, OPEN))
        await _next(call, BYSTANDER, "session_created")

        # More than the session's bucket (20 commands) and the bound together, a batch each:
        # past the bucket the session pauses at every refusal, and the requests pile up.
        for seq in range(1, appends + 1):
            await call.write(_batch(FLOODER, _append(seq, ms)))
        end = (await _next(call, FLOODER, "never")).end
        assert end.status_code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], end
        assert end.code == "rate_limit_exceeded"
        assert end.retry_after.ToMilliseconds() == 1000

        # The other stream on the call is untouched.
        await call.write(_batch(BYSTANDER, _append(1, 100), HEARTBEAT))
        answer = await _next(call, BYSTANDER, "heartbeat_ack")
        assert answer.event.applied_client_seq == 1

        # The flooder's session waits, detached, and resumes on a new stream: it applied what
        # reached it before the cut (not all), and takes the next number, as a client resends.
        session_id = created.session_created.session.id
        [session] = [s for s in running.registry if s.id == session_id]
        await eventually(lambda: session.state is State.DETACHED)
        clock.advance(3.0)  # its bucket refills a little, within the disconnect grace
        resume = pb.ResumeSession(
            session_id=session_id,
            resume_token=created.session_created.resume_token,
            last_received_seq=created.seq,
        )
        await call.write(_batch(RESUMED, pb.ConverseRequest(resume_session=resume)))
        resumed = (await _next(call, RESUMED, "session_resumed")).event
        applied = resumed.applied_client_seq
        assert applied < appends
        await call.write(_batch(RESUMED, _append(applied + 1, 10), HEARTBEAT))
        again = await _next(call, RESUMED, "heartbeat_ack")
        assert again.event.applied_client_seq == applied + 1
        call.cancel()


async def test_new_streams_past_the_cap_are_refused_before_anything_is_made_for_them() -> None:
    """A call holds at most the server's stream cap (here 4): a fifth stream is ended at once,
    typed, and the others go on; a batch that starts more streams than the cap at all ends the
    call (200,000 of them had frozen the loop for 15 s and taken 2 GB)."""
    async with (
        serving(settings(max_concurrent_streams=4)) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        method = channel.stream_stream(
            METHOD,
            request_serializer=pb.ConverseManyRequest.SerializeToString,
            response_deserializer=pb.ConverseManyResponse.FromString,
        )
        call = method()
        for stream_id in range(1, 5):
            await call.write(_batch(stream_id, OPEN))
            assert (await _next(call, stream_id, "session_created")).HasField("event")
        await call.write(_batch(5, OPEN))
        end = (await _next(call, 5, "session_created")).end
        assert (end.code, end.status_code) == ("resource_exhausted", 8)  # RESOURCE_EXHAUSTED
        await call.write(_batch(1, HEARTBEAT))
        assert (await _next(call, 1, "heartbeat_ack")).HasField("event")  # the others go on
        flood = method()
        many = [pb.StreamRequest(stream_id=n, request=OPEN) for n in range(10, 15)]
        await flood.write(pb.ConverseManyRequest(requests=many))
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await flood.read()
        assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "at most 4 streams" in (ended.value.details() or "")
        call.cancel()
