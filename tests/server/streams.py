"""Small helpers to drive a raw Converse stream in tests."""

from __future__ import annotations

import asyncio

import grpc

from omni_grpc.wire import pb

READ_TIMEOUT_S = 10.0


async def read(call: grpc.aio.StreamStreamCall) -> pb.ConverseResponse:
    """Reads one event or fails the test after a timeout."""
    message = await asyncio.wait_for(call.read(), READ_TIMEOUT_S)
    assert message is not grpc.aio.EOF, "the stream ended"
    return message


async def read_until(call: grpc.aio.StreamStreamCall, kind: str) -> list[pb.ConverseResponse]:
    """Reads events up to and including the first of ``kind``."""
    events = []
    while True:
        event = await read(call)
        events.append(event)
        if event.WhichOneof("event") == kind:
            return events


async def open_stream(
    stub: object,
    config: pb.SessionConfig | None = None,
    metadata: tuple[tuple[str, str], ...] | None = None,
) -> tuple[grpc.aio.StreamStreamCall, pb.SessionCreated]:
    """Opens a session; returns the call and its session_created."""
    call = stub.Converse(metadata=metadata)  # type: ignore[attr-defined]
    await call.write(pb.ConverseRequest(open_session=pb.OpenSession(config=config)))
    created = await read(call)
    assert created.WhichOneof("event") == "session_created", created
    return call, created.session_created


def resume_request(created: pb.SessionCreated, last_received_seq: int = 0) -> pb.ConverseRequest:
    """The first message of a stream that resumes ``created``'s session from a cursor."""
    return pb.ConverseRequest(
        resume_session=pb.ResumeSession(
            session_id=created.session.id,
            resume_token=created.resume_token,
            last_received_seq=last_received_seq,
        )
    )


def pcm16(ms: int, rate_hz: int = 24000) -> bytes:
    """A quiet ramp of ``ms`` milliseconds of pcm16 (not silence, so it is recognisable)."""
    samples = rate_hz * ms // 1000
    return b"".join(((i % 200) - 100).to_bytes(2, "little", signed=True) for i in range(samples))


def kinds(events: list[pb.ConverseResponse]) -> list[str]:
    return [str(event.WhichOneof("event")) for event in events]
