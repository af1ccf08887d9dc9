"""What a durable session keeps for a new owner to replay (omni_grpc/server/replay_log.py):
the appends since the input last ended and the commands the engine has not applied, and the
changes a store round writes of them. tests/server/test_durable.py writes them to a real Redis;
tests/cluster/test_exactly_once.py kills the owner at each moment of a turn."""

from __future__ import annotations

import pytest

from omni_grpc.server import fault_hook
from omni_grpc.server.replay_log import EMPTY_LIST, SILENCE_KEPT_BYTES, ReplayLog, replay_order
from omni_grpc.wire import pb
from tests.core.helpers import append, cmd


def _commit(seq: int) -> pb.ConverseRequest:
    return cmd(seq, commit_input_audio=pb.CommitInputAudio())


def _seqs(payloads: list[bytes]) -> list[int]:
    return [pb.ConverseRequest.FromString(p).client_seq for p in payloads]


def test_appends_stay_until_the_engine_applied_the_commit_that_ended_them() -> None:
    log = ReplayLog(1000)
    log.appended(append(1, b"\0" * 4), 4)
    log.appended(append(2, b"\0" * 4), 4)
    assert log.take_changes(whole=True)[:2] == (
        -1,
        [append(1, b"\0" * 4).SerializeToString(), append(2, b"\0" * 4).SerializeToString()],
    )
    log.submitted("commit_input_audio", _commit(3))
    log.appended(append(4, b"\0" * 2), 2)  # the next turn begins before the commit is applied
    drop, new, commands = log.take_changes(whole=False)
    assert (drop, _seqs(new), _seqs(commands or [])) == (0, [4], [3])
    log.input_taken()  # the commit's input_committed: its own marker drops the appends
    log.applied(2)
    assert log.take_changes(whole=False) == (0, [], None)
    log.applied(3)
    drop, new, commands = log.take_changes(whole=False)
    assert (drop, new, commands) == (2, [], [])  # append 4 stays: the next turn's
    assert len(log) == 1


def test_server_vad_drops_what_the_engine_had_heard_when_it_committed() -> None:
    log = ReplayLog(1000)
    for seq in (1, 2, 3):
        log.appended(append(seq), 2)
    log.take_changes(whole=False)
    log.applied(2)
    log.input_taken()  # the engine cut a turn on its own, having applied appends 1 and 2
    assert log.take_changes(whole=False) == (2, [], None)
    assert len(log) == 1


def test_the_log_is_bounded_by_the_pending_input_dropping_the_oldest() -> None:
    log = ReplayLog(5)
    log.appended(append(1), 2)
    log.take_changes(whole=False)
    log.appended(append(2), 2)
    log.appended(append(3), 2)  # 6 > 5: append 1 goes (written: dropped from the store)
    drop, new, _ = log.take_changes(whole=False)
    assert (drop, _seqs(new)) == (1, [2, 3])
    log.appended(append(4), 2)
    log.appended(append(5), 2)  # 2 and 3 go; 4 and 5, never written, are not sent
    log.appended(append(6), 4)
    drop, new, _ = log.take_changes(whole=False)
    assert (drop, _seqs(new)) == (2, [6])


def test_an_append_the_edge_refused_is_not_replayed() -> None:
    log = ReplayLog(100)
    log.appended(append(1), 2)
    log.refused(1)  # never written: nothing to tell the store
    assert log.take_changes(whole=False) == (0, [], None)
    log.appended(append(2), 2)
    log.appended(append(3), 2)
    log.take_changes(whole=False)
    log.refused(3)  # written already: the store's list is written again
    drop, new, _ = log.take_changes(whole=False)
    assert (drop, _seqs(new)) == (EMPTY_LIST, [2])


def test_commands_leave_once_applied_and_replay_in_the_client_s_order() -> None:
    log = ReplayLog(100)
    log.appended(append(1), 2)
    log.submitted(
        "create_conversation_item", cmd(2, create_conversation_item=pb.CreateConversationItem())
    )
    log.submitted("create_response", cmd(3, create_response=pb.CreateResponse()))
    log.submitted("heartbeat", cmd(0, heartbeat=pb.Heartbeat()))  # unnumbered: nothing kept
    log.appended(append(4), 2)
    _, appends, commands = log.take_changes(whole=True)
    assert [r.client_seq for r in replay_order(appends, commands or [])] == [1, 2, 3, 4]
    log.applied(2)
    assert _seqs(log.take_changes(whole=False)[2] or []) == [3]


@pytest.mark.parametrize(
    ("value", "aim"),
    [
        ("", None),
        ("command:commit_input_audio:1", ("command", "commit_input_audio", 1)),
        ("event:output_audio_delta:3", ("event", "output_audio_delta", 3)),
    ],
)
def test_the_fault_hook_reads_its_aim(value: str, aim: tuple[str, str, int] | None) -> None:
    assert fault_hook._read(value) == aim


@pytest.mark.parametrize("value", ["commit:1", "response:x:1", "event:x:0"])
def test_a_bad_aim_stops_the_start(value: str) -> None:
    with pytest.raises(ValueError):
        fault_hook._read(value)


def test_the_hook_fires_at_the_aimed_command_only_for_sessions_opened_here() -> None:
    assert fault_hook.armed(adopted=False) is None  # unset, as in production
    fault = fault_hook.Fault("command", "append_input_audio", 2)
    aims = [fault.aimed("command", "append_input_audio") for _ in range(3)]
    assert aims == [False, True, False]
    assert not fault.aimed("event", "append_input_audio")


def test_server_vad_keeps_only_the_latest_silence_and_all_of_a_turn() -> None:
    log = ReplayLog(10 * SILENCE_KEPT_BYTES)
    chunk = SILENCE_KEPT_BYTES // 4
    for seq in range(1, 9):  # 8 chunks while nobody speaks: the last 4 are kept
        log.appended(append(seq), chunk, vad=True)
    assert len(log) == 4
    log.speaking = True  # speech_started: the turn is kept whole, up to the session's bound
    for seq in range(9, 17):
        log.appended(append(seq), chunk, vad=True)
    assert len(log) == 12
    log.applied(16)
    log.input_taken()  # the engine cut the turn: what it heard goes, silence is bounded again
    assert (len(log), log.speaking) == (0, False)
