"""The pure parts of the client: command journal, event cursor, backoff policy and options."""

from __future__ import annotations

import random

import pytest

from omni_grpc.client import ClientOptions, ReconnectPolicy, ResumeHandle
from omni_grpc.client.bookkeeping import CommandJournal, CommandJournalFull, EventCursor, EventGap
from omni_grpc.wire import pb


def heartbeat() -> pb.ConverseRequest:
    return pb.ConverseRequest(heartbeat=pb.Heartbeat())


def audio(n_bytes: int) -> pb.ConverseRequest:
    return pb.ConverseRequest(append_input_audio=pb.AppendInputAudio(audio=b"\0" * n_bytes))


def test_command_journal_numbers_from_one_and_keeps_until_applied() -> None:
    journal = CommandJournal(max_commands=8, max_bytes=1 << 20)
    seqs = [journal.number(heartbeat()) for _ in range(5)]
    assert seqs == [1, 2, 3, 4, 5]
    assert (len(journal), journal.last_seq, journal.next_seq) == (5, 5, 6)
    assert journal.trim(3) == 3
    assert [r.client_seq for r in journal.pending_after(3)] == [4, 5]
    assert journal.trim(3) == 0  # trimming is idempotent
    assert journal.trim(5) == 2
    assert len(journal) == 0 and journal.retained_bytes == 0


def test_pending_after_resends_exactly_what_the_server_lacks() -> None:
    journal = CommandJournal(max_commands=16, max_bytes=1 << 20)
    for _ in range(10):
        journal.number(audio(320))
    journal.trim(2)  # an event said 2 was applied
    # The resume reports 6: only 7..10 go again, and 3..6 are forgotten.
    assert [r.client_seq for r in journal.pending_after(6)] == [7, 8, 9, 10]
    assert len(journal) == 4
    with pytest.raises(ValueError, match="beyond the newest"):
        journal.pending_after(11)


def test_command_journal_bounds_count_and_bytes() -> None:
    by_count = CommandJournal(max_commands=2, max_bytes=1 << 20)
    by_count.number(heartbeat())
    by_count.number(heartbeat())
    assert not by_count.has_room(2)
    with pytest.raises(CommandJournalFull):
        by_count.number(heartbeat())
    assert by_count.next_seq == 3  # a refused command takes no number
    by_count.trim(1)
    assert by_count.number(heartbeat()) == 3

    by_bytes = CommandJournal(max_commands=100, max_bytes=1000)
    by_bytes.number(audio(600))
    assert not by_bytes.has_room(audio(600).ByteSize())
    assert by_bytes.has_room(audio(300).ByteSize())
    # An empty journal takes even an oversize command; the server's limit decides about it.
    big = CommandJournal(max_commands=1, max_bytes=10)
    assert big.number(audio(5000)) == 1


def test_command_journal_rejects_nonsense_bounds() -> None:
    with pytest.raises(ValueError):
        CommandJournal(max_commands=0, max_bytes=10)
    with pytest.raises(ValueError):
        CommandJournal(max_commands=1, max_bytes=10, next_seq=0)
    assert CommandJournal(max_commands=1, max_bytes=10, next_seq=42).number(heartbeat()) == 42


def test_cursor_delivers_each_seq_once_and_in_order() -> None:
    cursor = EventCursor()
    assert [cursor.admit(s) for s in (1, 2, 2, 1, 3, 0, 0, 4)] == [
        True,
        True,
        False,
        False,
        True,
        True,
        True,
        True,
    ]
    assert cursor.last_seq == 4 and cursor.duplicates == 2
    with pytest.raises(EventGap, match="seq 6 follows 4"):
        cursor.admit(6)
    resumed = EventCursor(10)
    assert not resumed.admit(10) and resumed.admit(11)
    with pytest.raises(ValueError):
        EventCursor(-1)


def test_backoff_grows_caps_and_jitters_repeatably() -> None:
    policy = ReconnectPolicy(initial_backoff_s=0.05, max_backoff_s=2.0, multiplier=2.0, jitter=0.5)
    first = [d for d, _ in zip(policy.delays(random.Random(3)), range(12), strict=False)]
    again = [d for d, _ in zip(policy.delays(random.Random(3)), range(12), strict=False)]
    assert first == again
    bases = [min(0.05 * 2**i, 2.0) for i in range(12)]
    for delay, base in zip(first, bases, strict=True):
        assert base * 0.5 <= delay <= base
    assert max(first) > 1.0  # it reached the cap region
    no_jitter = ReconnectPolicy(jitter=0.0)
    assert [d for d, _ in zip(no_jitter.delays(), range(3), strict=False)] == [0.05, 0.1, 0.2]


@pytest.mark.parametrize(
    "bad",
    [
        {"initial_backoff_s": 0.0},
        {"initial_backoff_s": 3.0, "max_backoff_s": 2.0},
        {"multiplier": 0.5},
        {"jitter": 1.0},
        {"max_attempts": 0},
        {"max_elapsed_s": 0.0},
    ],
)
def test_backoff_rejects_bad_policies(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ReconnectPolicy(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [
        {"ack_every_events": 0},
        {"event_buffer": 0},
        {"ack_interval_s": 0.0},
        {"handshake_timeout_s": -1.0},
    ],
)
def test_options_reject_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ClientOptions(**bad)  # type: ignore[arg-type]


def test_resume_handle_never_shows_its_token() -> None:
    handle = ResumeHandle("sess_1", "s3cret-token", 7)
    assert "s3cret" not in repr(handle) and "sess_1" in repr(handle)
