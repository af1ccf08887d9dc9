"""The journal: contiguous numbering, exact replay, acks, the time window and overflow."""

from __future__ import annotations

import pytest

from omni_grpc.core import Effects, Limits, ResumeGap
from omni_grpc.core.journal import CursorAhead, Journal, JournalGap
from omni_grpc.wire import pb

from .helpers import ack, decode, heartbeat, open_session, stamped, transcript


def journal(ttl_s: float = 60.0, max_bytes: int = 1000) -> Journal:
    return Journal(ttl_s=ttl_s, max_bytes=max_bytes)


def test_seq_starts_at_one_and_has_no_gaps() -> None:
    j = journal()
    assert (j.head, j.next_seq, len(j)) == (0, 1, 0)
    for n in range(1, 6):
        assert j.next_seq == n
        assert j.record(b"e%d" % n, now=float(n))
        assert j.head == n
    assert j.replay_after(0, now=5.0) == [b"e1", b"e2", b"e3", b"e4", b"e5"]
    assert j.replay_after(3, now=5.0) == [b"e4", b"e5"]
    assert j.replay_after(5, now=5.0) == []


def test_entries_after_gives_what_is_newer_oldest_first_whatever_was_trimmed() -> None:
    """What a store writes: every kept event after the seq it asks from."""
    j = journal()
    for n in range(1, 7):
        j.record(b"e%d" % n, now=0.0)
    j.ack(2)
    assert j.entries_after(0) == [(n, b"e%d" % n) for n in range(3, 7)]
    assert j.entries_after(4) == [(5, b"e5"), (6, b"e6")]
    assert j.entries_after(6) == []
    assert j.entries_after(9) == []


def test_newest_is_the_last_kept_event_or_none() -> None:
    """What a recorder reads after a command that made one event."""
    j = journal()
    assert j.newest() is None
    j.record(b"e1", now=1.0)
    j.record(b"e2", now=2.0)
    assert j.newest() == (2, 2.0, b"e2") == j.newest_after(1)[0]
    j.ack(2)
    assert j.newest() is None


def test_ack_trims_and_reack_is_idempotent() -> None:
    j = journal()
    for payload in (b"aa", b"bbb", b"cccc"):
        j.record(payload, now=0.0)
    assert j.retained_bytes == 9
    assert j.ack(2) == 2
    assert (len(j), j.retained_bytes) == (1, 4)
    assert j.ack(2) == 0  # the same ack again changes nothing
    assert j.ack(1) == 0  # nor does an older one
    assert (len(j), j.retained_bytes, j.head) == (1, 4, 3)
    assert j.replay_after(2, now=0.0) == [b"cccc"]
    with pytest.raises(JournalGap) as gap:
        j.replay_after(1, now=0.0)  # seq 2 was acknowledged: the client said it had it
    assert gap.value.reason == pb.RESYNC_REASON_JOURNAL_GAP
    assert j.ack(3) == 1
    assert (len(j), j.retained_bytes) == (0, 0)


@pytest.mark.parametrize(("head", "acked"), [(0, 1), (2, 3), (2, 2**64 - 1)])
def test_ack_ahead_of_head_is_refused_and_changes_nothing(head: int, acked: int) -> None:
    j = journal()
    for _ in range(head):
        j.record(b"x", now=0.0)
    with pytest.raises(ValueError, match=f"seq {acked} is ahead of the newest event {head}"):
        j.ack(acked)
    assert (len(j), j.head) == (head, head)
    assert j.replay_after(0, now=0.0) == [b"x"] * head


def test_ack_of_zero_on_an_empty_journal_is_a_no_op() -> None:
    j = journal()
    assert j.ack(0) == 0
    assert j.replay_after(0, now=0.0) == []


# (produced at, replay at, cursor) -> the replay, or None for a gap. TTL 60 s; events at
# t = 0, 10, 20 with seq 1, 2, 3. An entry is pruned once strictly older than the window.
TTL_CASES = [
    (60.0, 0, [b"e1", b"e2", b"e3"]),  # exactly 60 s old: still kept
    (60.001, 0, None),  # seq 1 is gone, so a cursor before it is a gap
    (60.001, 1, [b"e2", b"e3"]),  # but the client that had seq 1 is fine
    (69.9, 1, [b"e2", b"e3"]),
    (70.5, 1, None),
    (70.5, 2, [b"e3"]),
    (80.5, 2, None),
    (200.0, 3, []),  # everything aged out, the client has everything: nothing to replay
    (200.0, 2, None),
]


@pytest.mark.parametrize(("now", "cursor", "expected"), TTL_CASES)
def test_ttl_pruning(now: float, cursor: int, expected: list[bytes] | None) -> None:
    j = journal(ttl_s=60.0)
    for n, at in enumerate((0.0, 10.0, 20.0), start=1):
        j.record(b"e%d" % n, now=at)
    if expected is None:
        with pytest.raises(JournalGap) as gap:
            j.replay_after(cursor, now=now)
        assert gap.value.reason == pb.RESYNC_REASON_JOURNAL_GAP
    else:
        assert j.replay_after(cursor, now=now) == expected


def test_recording_prunes_aged_entries() -> None:
    j = journal(ttl_s=10.0, max_bytes=8)
    j.record(b"1234", now=0.0)
    j.record(b"5678", now=1.0)
    # Full at 8 bytes, but both entries are older than the window by now, so this fits.
    assert j.record(b"abcd", now=11.5)
    assert (len(j), j.retained_bytes, j.overflowed) == (1, 4, False)


def test_cursor_ahead_of_head_is_a_conflict_not_a_gap() -> None:
    j = journal()
    j.record(b"x", now=0.0)
    with pytest.raises(CursorAhead, match="seq 2 is ahead of the newest event 1"):
        j.replay_after(2, now=0.0)


def test_overflow_is_permanent_and_evicts_nothing() -> None:
    j = journal(max_bytes=10)
    assert j.record(b"123456", now=0.0)
    assert j.record(b"7890", now=0.0)  # exactly at the cap fits
    assert not j.record(b"x", now=0.0)
    assert j.overflowed
    assert (j.head, len(j), j.retained_bytes) == (2, 2, 10)  # nothing was evicted for space
    assert j.ack(2) == 2
    assert not j.record(b"x", now=0.0)  # room again, but numbering stays off for good
    assert j.head == 2
    with pytest.raises(JournalGap) as gap:
        j.replay_after(2, now=0.0)
    assert gap.value.reason == pb.RESYNC_REASON_JOURNAL_OVERFLOW


def test_a_single_event_larger_than_the_cap_overflows() -> None:
    j = journal(max_bytes=4)
    assert not j.record(b"12345", now=0.0)
    assert (j.overflowed, j.head) == (True, 0)


# -- through the session ----------------------------------------------------------------


def test_replay_resends_the_exact_bytes_that_went_on_the_wire() -> None:
    opened = open_session()
    s = opened.session
    first = s.publish(transcript("a"), now=1.0)
    second = s.receive(1, heartbeat(), now=2.0)
    sent = [payload for _, payload in first.sends + second.sends]
    assert decode(first) == [stamped(transcript("a"), 1)]
    assert s.detach(1, now=3.0)
    _, effects = s.resume(opened.token, 0, now=4.0)
    assert [payload for _, payload in effects.sends[1:]] == sent


def test_events_produced_while_detached_are_journaled_not_sent() -> None:
    opened = open_session()
    s = opened.session
    s.detach(1, now=1.0)
    effects = s.publish(transcript("missed"), now=2.0)
    assert effects.sends == []
    assert s.journal.head == 1
    _, resumed = s.resume(opened.token, 0, now=3.0)
    assert decode(resumed)[1:] == [stamped(transcript("missed"), 1)]


def test_ack_through_the_session_trims_and_an_ack_ahead_is_an_error_event() -> None:
    opened = open_session()
    s = opened.session
    s.publish(transcript("a"), now=0.0)
    s.publish(transcript("b"), now=0.0)
    assert s.receive(1, ack(1), now=0.0).sends == []
    assert len(s.journal) == 1
    assert s.receive(1, ack(1), now=0.0).sends == []  # idempotent
    refused = s.receive(1, ack(9, client_seq=1, event_id="ev-ack"), now=0.0)
    error = pb.ErrorReport(
        code="invalid_event_ack",
        type=pb.ERROR_TYPE_INVALID_REQUEST,
        message="seq 9 is ahead of the newest event 2",
        param="seq",
        client_seq=1,
        event_id="ev-ack",
    )
    assert decode(refused) == [pb.ConverseResponse(seq=3, applied_client_seq=1, error=error)]
    assert len(s.journal) == 2  # the error itself is history, and nothing was trimmed


def test_session_overflow_says_so_once_then_goes_on_unnumbered() -> None:
    opened = open_session(limits=Limits(journal_max_bytes=60))
    s = opened.session
    sizes = []
    seq = 0
    effects = Effects()
    while not s.journal.overflowed:
        effects = s.publish(transcript(f"event-{seq:02d}"), now=0.0)
        sizes.append(len(effects.sends))
        seq += 1
    resync = pb.ConverseResponse(
        resync_required=pb.ResyncRequired(session_id=s.id, reason=pb.RESYNC_REASON_JOURNAL_OVERFLOW)
    )
    # The event that did not fit goes out after one resync_required, both unnumbered.
    assert decode(effects) == [resync, transcript(f"event-{seq - 1:02d}")]
    assert sizes == [1] * (seq - 1) + [2]
    later = s.publish(transcript("later"), now=0.0)
    assert decode(later) == [transcript("later")]  # no second resync, still seq 0
    assert decode(s.receive(1, heartbeat(), now=0.0)) == [
        pb.ConverseResponse(heartbeat_ack=pb.HeartbeatAck(session_id=s.id))
    ]
    s.detach(1, now=1.0)
    with pytest.raises(ResumeGap, match="the journal overflowed") as gap:
        s.resume(opened.token, s.journal.head, now=2.0)
    assert pb.ConverseResponse.FromString(gap.value.payload) == resync


def test_overflow_while_detached_is_reported_at_the_resume() -> None:
    opened = open_session(limits=Limits(journal_max_bytes=200))
    s = opened.session
    s.receive(1, heartbeat(1), now=0.0)
    s.detach(1, now=0.0)
    assert not s.journal.overflowed  # it overflows below, with nobody to tell
    for n in range(10):
        assert s.publish(transcript(f"lost-{n}"), now=0.0).sends == []
    assert s.journal.overflowed
    with pytest.raises(ResumeGap) as gap:
        s.resume(opened.token, 1, now=1.0)
    assert pb.ConverseResponse.FromString(gap.value.payload) == pb.ConverseResponse(
        applied_client_seq=1,
        resync_required=pb.ResyncRequired(
            session_id=s.id, reason=pb.RESYNC_REASON_JOURNAL_OVERFLOW
        ),
    )


def test_newest_after_reads_the_new_entries_from_the_newest_end() -> None:
    journal = Journal(ttl_s=60.0, max_bytes=1024)
    for n in range(1, 6):
        journal.record(bytes([n]), float(n))
    journal.ack(2)
    assert [(seq, at) for seq, at, _ in journal.newest_after(3)] == [(4, 4.0), (5, 5.0)]
    assert [seq for seq, _, _ in journal.newest_after(0)] == [3, 4, 5]  # what is kept
    assert journal.newest_after(5) == []
