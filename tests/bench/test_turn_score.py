"""The turn-taking benchmark's scorer and client player on records made by hand: what counts as
an early answer, a cut reply, the moment playback stopped, a resume that repeated audio."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import make_test_speech as speech
import turn_score
from turn_driver import Heard, Player, Record
from turn_set import Dialogue


def scene(*segments: tuple[float, float]) -> speech.Scene:
    """A scene with speech where ``segments`` say (no sound: the scorer reads only where)."""
    end = max(stop for _, stop in segments) + 500
    return speech.Scene(
        signal=np.zeros(int(end * 16), np.float32),
        segments=[(start, stop, "words") for start, stop in segments],
    )


def record(dialogue: Dialogue, *events: Heard, **moments: float) -> Record:
    return Record(dialogue, "test", list(events), **moments)


HESITATION = Dialogue("hesitation", "h", scene((300, 1200), (2000, 2800)), pause_ms=800)


def test_a_turn_ended_at_the_hesitation_is_an_early_answer() -> None:
    early = record(HESITATION, Heard(1.0, "speech_stopped", audio_end_ms=1230))
    whole = record(HESITATION, Heard(1.0, "speech_stopped", audio_end_ms=2820))
    assert turn_score.answered_early(early) and not turn_score.answered_early(whole)
    row = turn_score.score("s", [early, whole])
    assert row.early_judged == row.early_all == (1, 2)


def test_first_audio_is_timed_from_the_last_speech_sample_sent() -> None:
    complete = Dialogue("complete", "c", scene((300, 1500)))
    timed = record(
        complete,
        Heard(10.0, "audio", "r1"),  # an earlier answer's audio does not count
        Heard(12.45, "audio", "r2"),
        Heard(12.55, "audio", "r2"),
        speech_end=12.0,
    )
    assert turn_score.first_audio_ms(timed) == pytest.approx(450.0)
    unanswered = record(complete, speech_end=12.0)
    row = turn_score.score("s", [timed, unanswered])
    assert row.first_audio_p50 == pytest.approx(450.0) and row.unanswered == 1
    assert "(1 unanswered)" in turn_score.cells(row)[3]


def test_the_timing_table_says_where_a_turn_s_time_went() -> None:
    complete = Dialogue("complete", "what time is it", scene((300, 1500)))
    timed = record(
        complete,
        Heard(11.9, "turn_end", audio_end_ms=900.0, probability=0.1, sound=0.1, words=None),
        Heard(12.1, "turn_end", audio_end_ms=1500.0, probability=0.62, sound=0.9, decided_ms=96),
        Heard(
            12.3,
            "turn_end",
            audio_end_ms=1500.0,
            probability=0.95,
            wait_ms=200,
            decided_ms=300,
            sound=0.9,
            words=1.0,
        ),
        Heard(12.31, "speech_stopped", audio_end_ms=1500.0),
        Heard(12.4, "transcript", text="What time is it?"),
        Heard(12.75, "audio", "r1"),
        speech_end=12.0,
    )
    assert turn_score.timing(timed) == [
        "complete: what time is it",
        "0.90 / 1.00 / 0.95",
        "96 then 300",  # the sound's decision, then the words'; the earlier pause is not this
        "200",
        "310",
        "400",
        "750",
    ]
    never = record(complete, speech_end=12.0)
    assert turn_score.timing(never)[1:] == ["—"] * 6


def test_an_interruption_is_timed_to_what_first_stops_the_reply() -> None:
    over = Dialogue("interruption", "i", scene((300, 1200)), over=scene((0, 600)))
    stopped = record(
        over,
        Heard(5.0, "audio", "reply"),
        Heard(6.12, "overlap", "reply", action="pause"),
        Heard(6.40, "overlap", "reply", action="barge_in"),
        Heard(6.41, "response_done", "reply", cancelled=True),
        over_onset=6.0,
    )
    assert turn_score.stop_ms(stopped) == pytest.approx(120.0)
    assert turn_score.reply_cut(stopped)
    never = record(over, Heard(5.0, "audio", "reply"), over_onset=6.0)
    assert turn_score.stop_ms(never) is None and not turn_score.reply_cut(never)


def test_a_false_interruption_is_timed_to_the_resume() -> None:
    over = Dialogue("backchannel", "b", scene((300, 1200)), over=scene((0, 400)))
    resumed = record(
        over,
        Heard(5.0, "audio", "reply"),
        Heard(6.1, "overlap", "reply", action="pause"),
        Heard(6.65, "overlap", "reply", action="resume", audio_ms=900),
        over_end=6.4,
    )
    assert turn_score.resume_ms(resumed) == pytest.approx(250.0)
    assert turn_score.score("s", [resumed]).backchannel_cuts == (0, 1)


def test_the_player_stops_where_it_played_and_finds_a_resume_that_goes_back() -> None:
    player = Player()
    player.audio(Heard(10.0, "audio", "r", 0.0, 100.0))
    player.audio(Heard(10.05, "audio", "r", 100.0, 100.0))
    player.audio(Heard(10.1, "audio", "r", 200.0, 300.0))
    assert player.stop(10.3) == pytest.approx(300.0)  # 300 ms played, 200 ms dropped
    player.resume(10.6, 300.0)
    player.audio(Heard(10.6, "audio", "r", 300.0, 200.0))  # sent again from there
    assert player.stop(10.7) == pytest.approx(400.0)
    player.resume(10.8, 250.0)  # 150 ms would be heard twice
    assert player.resume_errors_ms == pytest.approx([0.0, -150.0])


def test_percentiles_take_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert turn_score.percentile(values, 0.5) == 10.0
    assert turn_score.percentile(values, 0.95) == 19.0
    assert turn_score.percentile([], 0.5) is None
