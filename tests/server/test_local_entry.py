"""The in-process entry point (omni_grpc.server.local) against a real service: what a stream
reads and how it fails are what a gRPC client of the same service would read."""

from __future__ import annotations

import grpc
import pytest

from omni_grpc.client.channel import ChannelSettings, Connection
from omni_grpc.server.app import RunningServer
from omni_grpc.server.local import LocalService
from omni_grpc.wire import pb
from omni_grpc.wire.stream_end import StreamBroken
from tests.serving import serving, settings

OPEN = pb.ConverseRequest(open_session=pb.OpenSession())


async def test_a_stream_opens_echoes_and_closes() -> None:
    async with serving(settings()) as running:
        stream = LocalService(running.sessions).converse()
        await stream.write(OPEN)
        created = await stream.read()
        assert created is not None and created.WhichOneof("event") == "session_created"
        await stream.write(pb.ConverseRequest(client_seq=1, close_session=pb.CloseSession()))
        kinds = []
        while (event := await stream.read()) is not None:
            kinds.append(event.WhichOneof("event"))
        assert kinds[-1] == "session_closed"
        assert len(running.registry) == 0


async def test_cancel_detaches_and_the_session_resumes() -> None:
    async with serving(settings()) as running:
        local = LocalService(running.sessions)
        stream = local.converse()
        await stream.write(OPEN)
        created = await stream.read()
        assert created is not None
        stream.cancel()
        with pytest.raises(StreamBroken) as broken:
            await stream.read()
        assert broken.value.status is None  # as a cancelled gRPC call reads
        assert local.streams == 0
        resume = pb.ResumeSession(
            session_id=created.session_created.session.id,
            resume_token=created.session_created.resume_token,
            last_received_seq=created.seq,
        )
        again = local.converse()
        await again.write(pb.ConverseRequest(resume_session=resume))
        resumed = await again.read()
        assert resumed is not None and resumed.WhichOneof("event") == "session_resumed"
        again.cancel()


async def _refusal(
    running: RunningServer, first: pb.ConverseRequest, **options: object
) -> StreamBroken:
    stream = LocalService(running.sessions, **options).converse()  # type: ignore[arg-type]
    await stream.write(first)
    with pytest.raises(StreamBroken) as broken:
        await stream.read()
    return broken.value


async def _grpc_refusal(running: RunningServer, first: pb.ConverseRequest) -> StreamBroken:
    connection = Connection(ChannelSettings(target=running.target))
    try:
        stream = connection.converse()
        with pytest.raises(StreamBroken) as broken:
            await stream.write(first)  # a call refused at once may fail the write already
            await stream.read()
        return broken.value
    finally:
        await connection.close()


async def test_refusals_read_as_the_grpc_status_does() -> None:
    unknown = pb.ResumeSession(session_id="sess_" + "0" * 32, resume_token="t")
    numbered = pb.ConverseRequest(client_seq=3, open_session=pb.OpenSession())
    async with serving(settings()) as running:
        for first in (pb.ConverseRequest(resume_session=unknown), numbered):
            local, remote = await _refusal(running, first), await _grpc_refusal(running, first)
            assert (local.status, local.code, str(local), local.retry_after_s) == (
                remote.status,
                remote.code,
                str(remote),
                remote.retry_after_s,
            )
        assert local.code == "bad_first_message"
        refused = await _refusal(running, OPEN, api_keys=("k1",))
        assert refused.status is grpc.StatusCode.UNAUTHENTICATED
        assert refused.code == "unauthenticated"
        refused = await _refusal(running, OPEN, max_streams=0)
        assert refused.status is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert len(running.registry) == 0


async def test_a_wrong_key_reads_as_the_grpc_key_check_says() -> None:
    async with serving(settings(api_keys=("k1",))) as running:
        first = OPEN
        local = await _refusal(running, first, api_keys=("k1",))
        remote = await _grpc_refusal(running, first)
        assert (local.status, local.code, str(local)) == (remote.status, remote.code, str(remote))
