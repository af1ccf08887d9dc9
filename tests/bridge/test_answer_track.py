"""A call's outgoing answer track on its own: what a clear cuts, and what it tells its
listener, with no peer connection (the track's frames are taken as aiortc would take them)."""

from __future__ import annotations

from bridge.webrtc.media import FRAME_MS, AnswerTrack, Cut

BYTES_PER_FRAME = 24_000 * FRAME_MS // 1000 * 2  # pcm16 mono at the call's rate


class Listener:
    """The track's listener: the answers whose audio began, and those told done, with how
    much of them was sent."""

    def __init__(self) -> None:
        self.began: list[str] = []
        self.ended: list[tuple[str, str, float]] = []

    def started(self, response_id: str) -> None:
        self.began.append(response_id)

    def stopped(self, response_id: str, item_id: str, sent_ms: float) -> None:
        self.ended.append((response_id, item_id, sent_ms))


def frames(track: AnswerTrack, count: int) -> None:
    for _ in range(count):
        track._take(BYTES_PER_FRAME)


def test_a_clear_between_two_chunks_of_a_slow_answer_cuts_it_where_it_got() -> None:
    listener = Listener()
    track = AnswerTrack(listener)
    track.queue("resp_1", "item_1", bytes(3 * BYTES_PER_FRAME))
    frames(track, 5)  # three frames of answer, then silence: the next chunk is late
    assert listener.began == ["resp_1"] and not track.busy
    assert track.clear() == [Cut("resp_1", "item_1", 3 * FRAME_MS)]
    # The cut answer is forgotten: its end tells nothing more, and a clear cuts it once.
    track.answer_complete("resp_1")
    frames(track, 2)
    assert listener.ended == [] and track.clear() == []


def test_a_clear_cuts_a_queued_answer_and_an_answer_played_out_is_told_once() -> None:
    listener = Listener()
    track = AnswerTrack(listener)
    track.queue("resp_1", "item_1", bytes(2 * BYTES_PER_FRAME))
    track.answer_complete("resp_1")
    frames(track, 3)
    assert listener.ended == [("resp_1", "item_1", 2 * FRAME_MS)]
    track.queue("resp_2", "item_2", bytes(4 * BYTES_PER_FRAME))
    frames(track, 1)
    assert track.clear() == [Cut("resp_2", "item_2", FRAME_MS)]
    assert listener.began == ["resp_1", "resp_2"] and len(listener.ended) == 1


def test_an_answer_not_yet_started_is_dropped_by_a_clear_without_a_cut() -> None:
    listener = Listener()
    track = AnswerTrack(listener)
    track.queue("resp_1", "item_1", bytes(2 * BYTES_PER_FRAME))
    assert track.clear() == []  # nothing of it left: nothing was heard, nothing to cut
    frames(track, 2)
    assert listener.began == []
