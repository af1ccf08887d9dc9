"""No stale output: once a response is over, whatever the engine still sends for it is dropped."""

from __future__ import annotations

import pytest

from omni_grpc.core import Effects
from omni_grpc.wire import pb

from .helpers import created, decode, delta, done, kinds, open_session, resume, stamped

LATE_OUTPUT = [
    pb.ConverseResponse(output_audio_delta=pb.OutputAudioDelta(audio=b"\0\0", response_id="r1")),
    pb.ConverseResponse(
        output_audio_transcript_delta=pb.OutputAudioTranscriptDelta(delta="x", response_id="r1")
    ),
    delta("r1"),
    pb.ConverseResponse(response_speak=pb.ResponseSpeak(response_id="r1")),
    done("r1"),  # a second ending of the same response
    created("r1"),  # a finished response does not start again
]


@pytest.mark.parametrize("late", LATE_OUTPUT, ids=lambda event: event.WhichOneof("event"))
@pytest.mark.parametrize("ending", ["done", "cancelled", "listen then done"])
def test_output_after_the_end_is_dropped_and_counted(
    late: pb.ConverseResponse, ending: str
) -> None:
    s = open_session().session
    s.publish(created("r1"), now=0.0)
    s.publish(delta("r1", "live"), now=0.0)
    if ending == "listen then done":
        s.publish(pb.ConverseResponse(response_listen=pb.ResponseListen(response_id="r1")), now=0.0)
        s.publish(done("r1"), now=0.0)
    else:
        s.publish(
            done(
                "r1",
                pb.RESPONSE_STATUS_CANCELLED
                if ending == "cancelled"
                else pb.RESPONSE_STATUS_COMPLETED,
            ),
            now=0.0,
        )
    head = s.journal.head
    assert s.publish(late, now=1.0) == Effects()
    assert s.publish(late, now=1.0) == Effects()
    assert (s.responses.dropped_stale_events, s.journal.head) == (2, head)


def test_other_responses_are_not_affected() -> None:
    s = open_session().session
    s.publish(created("r1"), now=0.0)
    s.publish(done("r1"), now=0.0)
    s.publish(created("r2"), now=0.0)
    assert decode(s.publish(delta("r2", "fresh"), now=0.0)) == [stamped(delta("r2", "fresh"), 4)]
    assert s.responses.dropped_stale_events == 0


def test_stale_output_while_detached_is_dropped_before_the_journal() -> None:
    opened = open_session()
    s = opened.session
    s.publish(created("r1"), now=0.0)
    s.publish(done("r1"), now=0.0)
    s.detach(1, now=0.0)
    s.publish(delta("r1"), now=0.0)
    _, effects, _ = resume(s, opened.token, 0, now=1.0)
    assert kinds(decode(effects)) == ["session_resumed", "response_created", "response_done"]
    assert s.responses.dropped_stale_events == 1


def test_a_listen_without_a_response_id_ends_nothing() -> None:
    s = open_session().session
    s.publish(created("r1"), now=0.0)
    s.publish(pb.ConverseResponse(response_listen=pb.ResponseListen(reason="overlap")), now=0.0)
    assert s.responses.active_response_id == "r1"
    assert s.publish(delta("r1"), now=0.0).sends


@pytest.mark.parametrize(
    ("status", "epoch"),
    [
        (pb.RESPONSE_STATUS_CANCELLED, 1),
        (pb.RESPONSE_STATUS_COMPLETED, 0),
        (pb.RESPONSE_STATUS_FAILED, 0),
        (pb.RESPONSE_STATUS_INCOMPLETE, 0),
    ],
)
def test_a_cancelled_response_bumps_the_epoch(status: int, epoch: int) -> None:
    opened = open_session()
    s = opened.session
    s.publish(created("r1"), now=0.0)
    s.publish(done("r1", status), now=0.0)  # type: ignore[arg-type]
    assert s.responses.epoch == epoch
    generation, effects = s.resume(opened.token, s.journal.head, now=0.0)
    assert decode(effects, generation)[0].session_resumed.session.epoch == epoch


def test_epochs_count_every_cancellation() -> None:
    s = open_session().session
    for n in range(3):
        s.publish(created(f"r{n}"), now=0.0)
        s.publish(done(f"r{n}", pb.RESPONSE_STATUS_CANCELLED), now=0.0)
    assert s.responses.epoch == 3
    assert s.view().epoch == 3


def test_finished_responses_are_remembered_within_a_bound() -> None:
    s = open_session().session
    for n in range(300):
        s.publish(done(f"r{n}"), now=0.0)
    # The newest 256 are still recognised as finished; memory does not grow past that.
    for n in range(300 - 256, 300):
        assert s.publish(delta(f"r{n}"), now=0.0) == Effects()
    assert s.responses.dropped_stale_events == 256
    assert s.publish(delta(f"r{300 - 257}"), now=0.0).sends  # forgotten: no longer filtered


def test_a_listen_that_ends_a_response_is_followed_by_its_one_done() -> None:
    # The reference sends response.listen naming the response it ends, then that response's
    # response.done; the done must reach the client (one done per created).
    s = open_session().session
    s.publish(created("r1"), now=0.0)
    listen = pb.ConverseResponse(response_listen=pb.ResponseListen(response_id="r1"))
    assert s.publish(listen, now=0.0).sends
    assert s.responses.active_response_id == "r1"
    assert kinds(decode(s.publish(done("r1"), now=0.0))) == ["response_done"]
    assert s.responses.active_response_id == ""
    assert s.publish(done("r1"), now=0.0) == Effects()  # a second done is stale
