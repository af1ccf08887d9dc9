"""Tenancy over a real socket: sessions bound to their key, one answer for every refusal,
refusals logged with session id and peer (rate-limited), health and reflection without a key.
"""

from __future__ import annotations

import logging
import secrets

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from omni_grpc.core import State
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server import refusals
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_metadata, resume_token_metadata
from tests.server.streams import open_stream, read
from tests.serving import FakeClock, eventually, serving, settings

OWNER, OTHER = "owner-key", "other-key"
KEYED = settings(api_keys=(OWNER, OTHER))


def unknown_id() -> str:
    return "sess_" + secrets.token_hex(16)  # shaped like a real one


async def resume_answer(
    channel: grpc.aio.Channel, session_id: str, token: str, key: str
) -> tuple[object, ...]:
    """What a refused resume tells the client: status, message, and the rich status."""
    call = duplex_pb2_grpc.DuplexServiceStub(channel).Converse(metadata=bearer_metadata(key))
    request = pb.ResumeSession(session_id=session_id, resume_token=token)
    await call.write(pb.ConverseRequest(resume_session=request))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await read(call)
    error = refused.value
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    return error.code(), error.details(), status.SerializeToString() if status else None


async def lookup_answer(
    channel: grpc.aio.Channel, session_id: str, token: str, key: str
) -> tuple[object, ...]:
    stub = duplex_pb2_grpc.DuplexServiceStub(channel)
    request = pb.GetSessionRequest(session_id=session_id)
    metadata = bearer_metadata(key) + resume_token_metadata(token)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.GetSession(request, metadata=metadata)
    error = refused.value
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    return error.code(), error.details(), status.SerializeToString() if status else None


async def heartbeat_answered(call: grpc.aio.StreamStreamCall, seq: int) -> bool:
    await call.write(pb.ConverseRequest(client_seq=seq, heartbeat=pb.Heartbeat()))
    return (await read(call)).WhichOneof("event") == "heartbeat_ack"


async def test_another_key_cannot_resume_take_over_or_read_a_session() -> None:
    async with serving(KEYED) as server, grpc.aio.insecure_channel(server.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        owner, created = await open_stream(stub, metadata=bearer_metadata(OWNER))
        session_id, token = created.session.id, created.resume_token
        unknown = await resume_answer(channel, unknown_id(), token, OWNER)
        assert unknown[0] == grpc.StatusCode.NOT_FOUND
        assert unknown[1] == "session_resume_expired: unknown or expired session"
        # A takeover (the owner's stream is attached) with the right token and another key,
        # and a wrong token with the right key: the unknown session's answer, to the byte.
        assert await resume_answer(channel, session_id, token, OTHER) == unknown
        assert await resume_answer(channel, session_id, "wrong", OWNER) == unknown
        assert await heartbeat_answered(owner, 1)  # the owner's stream did not notice
        assert await lookup_answer(channel, session_id, token, OTHER) == await lookup_answer(
            channel, unknown_id(), token, OTHER
        )
        found = await stub.GetSession(
            pb.GetSessionRequest(session_id=session_id),
            metadata=bearer_metadata(OWNER) + resume_token_metadata(token),
        )
        assert found.session.id == session_id
        session = server.registry.lookup(session_id, token, key=OWNER)
        owner.cancel()  # detached now: a plain resume with another key is refused too
        await eventually(lambda: session.state is State.DETACHED)
        assert await resume_answer(channel, session_id, token, OTHER) == unknown
        again = stub.Converse(metadata=bearer_metadata(OWNER))
        request = pb.ResumeSession(session_id=session_id, resume_token=token)
        await again.write(pb.ConverseRequest(resume_session=request))
        assert (await read(again)).WhichOneof("event") == "session_resumed"
        again.cancel()


async def test_without_server_keys_the_presented_key_still_binds_the_session() -> None:
    # A bridge with keys of its own in front of a keyless service passes each client's key on.
    async with serving() as server, grpc.aio.insecure_channel(server.target) as channel:
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        owner, created = await open_stream(stub, metadata=bearer_metadata(OWNER))
        session_id, token = created.session.id, created.resume_token
        unknown = await resume_answer(channel, unknown_id(), token, OTHER)
        assert await resume_answer(channel, session_id, token, OTHER) == unknown
        assert await resume_answer(channel, session_id, token, "") == unknown
        assert await heartbeat_answered(owner, 1)
        owner.cancel()


async def test_refusals_are_logged_with_session_and_peer_at_a_bounded_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    caplog.set_level(logging.WARNING, logger=refusals.__name__)
    async with serving(clock=clock) as server, grpc.aio.insecure_channel(server.target) as channel:
        probes = [unknown_id() for _ in range(refusals.MAX_LINES + 5)]
        for session_id in probes:
            await resume_answer(channel, session_id, "token", OTHER)
        lines = [r.getMessage() for r in caplog.records if r.name == refusals.__name__]
        assert len(lines) == refusals.MAX_LINES
        for session_id, line in zip(probes, lines, strict=False):
            assert f"resume refused (session_resume_expired): session '{session_id}'" in line
            assert "peer ipv4:127.0.0.1:" in line
        caplog.clear()
        clock.advance(refusals.INTERVAL_S)
        await lookup_answer(channel, "x" * 1000 + "\n", "token", OTHER)
        lines = [r.getMessage() for r in caplog.records if r.name == refusals.__name__]
        assert lines[0] == (
            f"5 more refusals were not logged (at most {refusals.MAX_LINES} lines per "
            f"{refusals.INTERVAL_S:.0f} s)"
        )
        # The client's text is shortened and quoted: no line of its own in the log.
        assert f"session '{'x' * refusals.SESSION_ID_CHARS}', peer" in lines[1]
        assert len(lines) == 2 and "\n" not in lines[1]


async def check_health(channel: grpc.aio.Channel) -> health_pb2.HealthCheckResponse:
    return await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())


async def list_services(channel: grpc.aio.Channel) -> set[str]:
    reflect = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo()
    await reflect.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    listed = await reflect.read()
    await reflect.done_writing()
    return {service.name for service in listed.list_services_response.service}


async def unauthenticated(call: object) -> bool:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as refused:
        return refused.code() == grpc.StatusCode.UNAUTHENTICATED
    return False


async def test_health_answers_probes_without_a_key_and_reflection_does_not() -> None:
    async with serving(KEYED) as server, grpc.aio.insecure_channel(server.target) as channel:
        assert (await check_health(channel)).status == health_pb2.HealthCheckResponse.SERVING
        assert await unauthenticated(list_services(channel))
        assert await unauthenticated(open_stream(duplex_pb2_grpc.DuplexServiceStub(channel)))


@pytest.mark.parametrize("health", [True, False])
async def test_reflection_without_a_key_is_a_choice(health: bool) -> None:
    chosen = settings(api_keys=(OWNER,), open_health=health, open_reflection=True)
    async with serving(chosen) as server, grpc.aio.insecure_channel(server.target) as channel:
        assert "omni.duplex.v1.DuplexService" in await list_services(channel)
        if health:
            assert (await check_health(channel)).status == health_pb2.HealthCheckResponse.SERVING
        else:
            assert await unauthenticated(check_health(channel))
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        assert await unauthenticated(
            stub.GetCapabilities(pb.GetCapabilitiesRequest())  # the service itself stays keyed
        )
