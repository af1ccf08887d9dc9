"""client_seq: each numbered command is applied once, in order, and a jump is refused."""

from __future__ import annotations

import pytest

from omni_grpc.core import Effects
from omni_grpc.wire import pb

from .helpers import (
    DEFAULT_INPUT,
    ack,
    append,
    cmd,
    decode,
    handed,
    heartbeat,
    open_session,
    requests,
    text,
)


def gap_error(expected: int, got: int, event_id: str = "") -> pb.ErrorReport:
    return pb.ErrorReport(
        code="client_seq_gap",
        type=pb.ERROR_TYPE_INVALID_REQUEST,
        message=f"expected client_seq {expected}, got {got}",
        param="client_seq",
        client_seq=got,
        event_id=event_id,
    )


def test_the_next_number_is_applied_and_forwarded() -> None:
    s = open_session().session
    for client_seq in (1, 2, 3):
        effects = s.receive(1, text(client_seq, f"t{client_seq}"), now=0.0)
        _, handed_on = handed(text(client_seq, f"t{client_seq}"))
        assert requests(effects) == [handed(text(client_seq, f"t{client_seq}"))]
        assert effects == Effects(engine=[handed_on])
        assert s.applied_client_seq == client_seq


@pytest.mark.parametrize("repeat", [1, 2])
def test_a_repeat_is_skipped_with_no_effect_at_all(repeat: int) -> None:
    s = open_session().session
    s.receive(1, text(1), now=0.0)
    s.receive(1, heartbeat(2), now=0.0)
    head = s.journal.head
    assert s.receive(1, text(repeat, "resent"), now=5.0) == Effects()
    assert (s.applied_client_seq, s.journal.head) == (2, head)


@pytest.mark.parametrize("jump", [2, 3, 10**6])
def test_a_jump_ahead_is_refused_and_echoes_the_offender(jump: int) -> None:
    s = open_session().session
    effects = s.receive(
        1, cmd(jump, "ev-7", append_input_text=pb.AppendInputText(text="x")), now=0.0
    )
    assert requests(effects) == []
    assert decode(effects) == [
        pb.ConverseResponse(seq=1, applied_client_seq=0, error=gap_error(1, jump, "ev-7"))
    ]
    assert s.applied_client_seq == 0
    # The refused number was not consumed: the client can send the right one next.
    assert requests(s.receive(1, text(1), now=0.0)) == [handed(text(1))]


@pytest.mark.parametrize("request_", [heartbeat(), ack(0)], ids=["heartbeat", "ack_events"])
def test_heartbeat_and_ack_may_come_unnumbered(request_: pb.ConverseRequest) -> None:
    s = open_session().session
    s.receive(1, text(1), now=0.0)
    effects = s.receive(1, request_, now=0.0)
    assert s.applied_client_seq == 1
    assert all(not event.HasField("error") for event in decode(effects))


def test_an_unnumbered_heartbeat_is_answered_with_the_applied_seq() -> None:
    s = open_session().session
    s.receive(1, text(1), now=0.0)
    assert decode(s.receive(1, heartbeat(), now=0.0)) == [
        pb.ConverseResponse(
            seq=1, applied_client_seq=1, heartbeat_ack=pb.HeartbeatAck(session_id=s.id)
        )
    ]


@pytest.mark.parametrize(
    ("request_", "kind"),
    [
        (append(0), "append_input_audio"),
        (text(0), "append_input_text"),
        (cmd(0, close_session=pb.CloseSession()), "close_session"),
        (cmd(0, update_session=pb.UpdateSession()), "update_session"),
        (cmd(0, commit_input_audio=pb.CommitInputAudio()), "commit_input_audio"),
    ],
)
def test_other_commands_need_a_number(request_: pb.ConverseRequest, kind: str) -> None:
    s = open_session().session
    request_.event_id = "ev-0"
    effects = s.receive(1, request_, now=0.0)
    assert requests(effects) == [] and not effects.ended
    assert decode(effects) == [
        pb.ConverseResponse(
            seq=1,
            error=pb.ErrorReport(
                code="bad_event",
                type=pb.ERROR_TYPE_INVALID_REQUEST,
                message=f"{kind} needs a client_seq",
                param="client_seq",
                event_id="ev-0",
            ),
        )
    ]
    assert s.state.name == "ATTACHED"


def test_numbered_heartbeats_and_acks_take_their_turn() -> None:
    s = open_session().session
    assert decode(s.receive(1, heartbeat(1), now=0.0))[0].applied_client_seq == 1
    assert s.receive(1, ack(1, client_seq=2), now=0.0) == Effects()
    assert s.applied_client_seq == 2
    refused = decode(s.receive(1, heartbeat(4), now=0.0))
    assert [event.error for event in refused] == [gap_error(3, 4)]


def test_a_refused_command_still_uses_up_its_number() -> None:
    # The error is the command's outcome: a resumed client must not resend it, and it learns
    # so from applied_client_seq, which the error itself carries.
    s = open_session().session
    refused = decode(s.receive(1, append(1, audio=b"\0"), now=0.0))  # half a PCM16 sample
    assert refused[0].error.code == "bad_audio"
    assert (refused[0].applied_client_seq, s.applied_client_seq) == (1, 1)
    assert s.receive(1, append(1), now=0.0) == Effects()
    assert requests(s.receive(1, append(2), now=0.0)) == [handed(append(2), DEFAULT_INPUT)]


def test_every_event_reports_the_last_applied_client_seq() -> None:
    s = open_session().session
    s.receive(1, text(1), now=0.0)
    s.receive(1, text(2), now=0.0)
    assert (
        decode(s.publish(pb.ConverseResponse(input_cleared=pb.InputCleared()), now=0.0))[
            0
        ].applied_client_seq
        == 2
    )
    assert decode(s.going_away(1.0, "drain"))[0].applied_client_seq == 2


def test_commands_from_a_replaced_generation_are_ignored_even_when_in_order() -> None:
    opened = open_session()
    s = opened.session
    s.resume(opened.token, 0, now=0.0)
    assert s.receive(1, text(1), now=0.0) == Effects()
    assert s.applied_client_seq == 0
    assert requests(s.receive(2, text(1), now=0.0)) == [handed(text(1))]
