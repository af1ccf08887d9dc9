"""The relay's bookkeeping for taking a session back after its replica died (bridge.rejoin),
without a server: what it keeps, what it sends again, when it asks, and when it waits."""

from __future__ import annotations

import asyncio

import pytest

from bridge.rejoin import MAX_BYTES, PROBE_EVERY, Rejoin
from omni_grpc.wire import pb


def append(size: int = 4800) -> pb.ConverseRequest:
    return pb.ConverseRequest(append_input_audio=pb.AppendInputAudio(audio=bytes(size)))


def event(seq: int, applied: int) -> pb.ConverseResponse:
    return pb.ConverseResponse(seq=seq, applied_client_seq=applied, heartbeat_ack=pb.HeartbeatAck())


def test_commands_are_numbered_on_from_the_services_count_and_kept_until_applied() -> None:
    rejoin = Rejoin(applied=7, last_seq=0)
    sent = [append() for _ in range(3)]
    for request in sent:
        rejoin.number(request)
    assert [r.client_seq for r in sent] == [8, 9, 10]
    rejoin.delivered(event(seq=4, applied=8))
    assert rejoin.last_seq == 4
    assert rejoin.unapplied(8) == sent[1:]  # exactly what the service had not applied
    assert rejoin.unapplied(10) == []


def test_a_resume_asks_from_the_clients_cursor_with_the_newest_token() -> None:
    rejoin = Rejoin(applied=0, last_seq=12)  # a socket whose first frame resumed at 12
    created = pb.ConverseResponse(session_created=pb.SessionCreated(resume_token="t1"))
    rejoin.delivered(created)
    resumed = pb.ConverseResponse(session_resumed=pb.SessionResumed(resume_token="t2"))
    rejoin.delivered(resumed)
    rejoin.delivered(pb.ConverseResponse(session_resumed=pb.SessionResumed()))  # an ending's
    request = rejoin.resume("sess_1").resume_session
    assert (request.session_id, request.resume_token, request.last_received_seq) == (
        "sess_1",
        "t2",
        12,
    )


def test_a_service_that_claims_more_than_was_sent_is_not_believed() -> None:
    rejoin = Rejoin(applied=0, last_seq=0)
    rejoin.number(append())
    with pytest.raises(ValueError, match="beyond the newest"):
        rejoin.unapplied(2)


def test_every_probe_every_th_unconfirmed_command_asks_how_far_the_service_got() -> None:
    rejoin = Rejoin(applied=0, last_seq=0)
    probes = [rejoin.number(append(10)) for _ in range(2 * PROBE_EVERY)]
    assert [i + 1 for i, probe in enumerate(probes) if probe] == [PROBE_EVERY, 2 * PROBE_EVERY]


async def test_a_full_journal_holds_the_next_command_until_the_service_confirms() -> None:
    rejoin = Rejoin(applied=0, last_seq=0)
    rejoin.number(append(MAX_BYTES - 100))
    big = append(1000)
    assert rejoin.full_for(big)
    waiting = asyncio.create_task(rejoin.room_for(big))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    rejoin.delivered(event(seq=1, applied=1))  # the heartbeat's answer
    await asyncio.wait_for(waiting, 1)
    assert not rejoin.full_for(big)
