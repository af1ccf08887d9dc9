"""The kit's turn-taking rules as pure logic: the waits of semantic end of turn, the judge of
speech over a reply, and the idle timer, all on a clock the test moves."""

from __future__ import annotations

import itertools

import pytest

from omni_grpc.engine.kit.end_of_turn import (
    FINISHED_P,
    SOUND_WEIGHT,
    UNFINISHED_P,
    UNREAD,
    WAITS,
    Judgement,
    TurnEndTimer,
    combined,
    wait_ms,
)
from omni_grpc.engine.kit.idle import IdleTimer, heard_by
from omni_grpc.engine.kit.overlap import SETTLE_MS, OverlapJudge, Rules, Verdict, content_words
from omni_grpc.wire import pb

AUTO = WAITS[pb.EAGERNESS_AUTO]


class StubScorer:
    """A turn scorer that knows a few texts (the kit's interface, no model)."""

    def __init__(self, known: dict[str, float]) -> None:
        self.known = known

    def probability(self, text: str) -> float:
        return self.known[text]


SCORER = StubScorer({"What is the capital of France?": 0.95, "I want to fly to": 0.02})


def test_the_wait_is_short_for_finished_words_and_long_for_unfinished_ones() -> None:
    finished = wait_ms(SCORER.probability("What is the capital of France?"), AUTO)
    unfinished = wait_ms(SCORER.probability("I want to fly to"), AUTO)
    assert (finished, unfinished) == (AUTO.finished_ms, AUTO.longest_ms)
    assert wait_ms(None, AUTO) == AUTO.unjudged_ms
    # In between the wait falls as the probability rises, never past either end.
    between = [wait_ms(p, AUTO) for p in (0.15, 0.3, 0.6, 0.85)]
    assert between == sorted(between, reverse=True)
    assert all(AUTO.finished_ms < w < AUTO.longest_ms for w in between)
    assert wait_ms(FINISHED_P, AUTO) == pytest.approx(AUTO.finished_ms)
    assert wait_ms(UNFINISHED_P, AUTO) == pytest.approx(AUTO.longest_ms)


@pytest.mark.parametrize(
    ("eagerness", "longest_ms"),
    [(pb.EAGERNESS_LOW, 8000), (pb.EAGERNESS_MEDIUM, 4000), (pb.EAGERNESS_HIGH, 2000)],
)
def test_no_wait_passes_the_eagernesss_longest(
    eagerness: pb.Eagerness.ValueType, longest_ms: float
) -> None:
    waits = WAITS[eagerness]
    assert waits.longest_ms == longest_ms
    assert max(wait_ms(p, waits) for p in (0.0, 1e-9, 1e-4, 0.5, 1.0)) == longest_ms


def test_a_pause_ends_the_turn_after_its_judged_wait_unless_speech_goes_on() -> None:
    timer = TurnEndTimer(pb.EAGERNESS_AUTO)
    timer.paused(1000.0)
    assert not timer.due(1000.0 + AUTO.longest_ms - 1) and timer.due(1000.0 + AUTO.longest_ms)
    decision = timer.judged(1000.0, Judgement(sound=0.97, words=0.93), now_ms=1350.0)
    assert decision is not None
    assert (decision.wait_ms, decision.decided_ms) == (AUTO.finished_ms, 350.0)
    assert timer.due(1350.0)  # the wait was over before the judgement came: at once
    event = decision.event("item_1", pb.EAGERNESS_AUTO, "Done.").turn_end_decision
    assert (event.item_id, event.audio_end_ms, event.wait_ms) == ("item_1", 1000.0, 200)
    assert (event.sound_probability, event.words_probability) == (0.97, 0.93)
    assert event.probability == pytest.approx(0.95)

    timer.paused(2000.0)
    timer.spoke()
    assert not timer.due(10_000.0)
    assert timer.judged(2000.0, Judgement(words=0.9), now_ms=2300.0) is None  # that pause is over
    timer.paused(3000.0)
    assert timer.judged(2000.0, Judgement(words=0.9), now_ms=3100.0) is None  # an older pause
    undecided = timer.judged(3000.0, Judgement(), now_ms=3100.0)
    assert undecided is not None and undecided.wait_ms == AUTO.unjudged_ms
    unjudged = undecided.event("i", pb.EAGERNESS_AUTO, "").turn_end_decision
    assert unjudged.probability == -1.0
    assert not unjudged.HasField("sound_probability")
    assert not unjudged.HasField("words_probability")


def test_two_judges_combine_with_no_cliff() -> None:
    # One judge alone is the probability; both, their weighted mean.
    assert combined(None, None) is None
    assert (combined(0.3, None), combined(None, 0.7)) == (0.3, 0.7)
    assert combined(0.2, 0.8) == pytest.approx(SOUND_WEIGHT * 0.2 + (1 - SOUND_WEIGHT) * 0.8)
    # A finished request that one judge gets wrong (a word misheard: the words read 0) is
    # still not taken for an unfinished one: the wait stays short of the longest.
    for fooled in (Judgement(sound=1.0, words=0.0), Judgement(sound=0.0, words=1.0)):
        assert fooled.probability is not None
        assert wait_ms(fooled.probability, AUTO) < AUTO.longest_ms / 2
    # And the wait moves smoothly with either judge: no step between neighbours.
    waits = [wait_ms(combined(0.95, words), AUTO) for words in (i / 100 for i in range(101))]
    steps = [abs(a - b) for a, b in itertools.pairwise(waits)]
    assert max(steps) < 0.1 * AUTO.longest_ms


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("Mm-hmm.", []),
        ("Yeah, yeah. Right.", []),
        ("Mmm, okay, I see.", []),
        ("(coughs)", []),
        ("[laughter] Uh-huh", []),
        ("No, wait, I meant Tuesday.", ["no", "wait", "i", "meant", "tuesday"]),
        ("Okay, stop.", ["stop"]),
        ("Hmmm... thank you", []),
    ],
)
def test_backchannels_and_fillers_are_not_counted_as_words(text: str, content: list[str]) -> None:
    assert content_words(text) == content


def rules(**changes: object) -> Rules:
    base = {
        "barge_in": True,
        "by_words": True,
        "min_duration_ms": 0.0,
        "min_words": 1,
        "resume": True,
        "timeout_ms": 2000.0,
    }
    return Rules(**{**base, **changes})  # type: ignore[arg-type]


def test_openais_default_ends_the_reply_at_the_onset_and_the_rest_judges() -> None:
    config = pb.SessionConfig(
        overlap_policy=pb.OVERLAP_POLICY_BARGE_IN_ON_SPEECH,
        turn_detection=pb.TurnDetection(interrupt_response=True),
        interruption=pb.InterruptionConfig(mode=pb.INTERRUPTION_MODE_SPEECH),
    )
    assert Rules.of(config).at_onset
    config.interruption.resume_false_interruption = True
    assert not Rules.of(config).at_onset
    config.overlap_policy = pb.OVERLAP_POLICY_LISTEN_ONLY
    assert not Rules.of(config).barge_in


def test_a_backchannel_is_no_interruption_once_its_words_are_known() -> None:
    judge = OverlapJudge(rules(), onset_ms=5000.0)
    assert judge.speaking(5300.0) is None
    assert judge.paused(5400.0, now_ms=5500.0) is None
    assert judge.tick(5400.0 + SETTLE_MS) is None  # its words are not known yet
    verdict = judge.heard("Mm-hmm.", now_ms=5600.0, upto_ms=5400.0)
    assert verdict is not None
    assert (verdict.verdict, verdict.reason) == (Verdict.FALSE, "backchannel")
    assert verdict.overlap_ms == 400
    assert judge.heard("No wait", now_ms=5700.0, upto_ms=5400.0) is verdict  # decided once


def test_words_that_are_not_backchannels_interrupt_even_before_the_pause() -> None:
    judge = OverlapJudge(rules(min_words=2), onset_ms=0.0)
    assert judge.heard("No", now_ms=400.0) is None
    verdict = judge.heard("No, wait", now_ms=800.0)
    assert verdict is not None and (verdict.verdict, verdict.reason) == (Verdict.MEANT, "min_words")


def test_a_cough_and_short_sounds_are_dropped() -> None:
    cough = OverlapJudge(rules(), onset_ms=0.0)
    cough.paused(250.0, now_ms=300.0)
    verdict = cough.heard("", now_ms=450.0, upto_ms=250.0)
    assert verdict is not None and (verdict.verdict, verdict.reason) == (Verdict.FALSE, "no_words")
    short = OverlapJudge(rules(by_words=False, min_duration_ms=600.0), onset_ms=0.0)
    short.paused(300.0, now_ms=350.0)
    assert short.tick(300.0 + SETTLE_MS - 1) is None  # a breath inside speech is no verdict
    verdict = short.tick(300.0 + SETTLE_MS)
    assert verdict is not None and (verdict.verdict, verdict.reason) == (Verdict.FALSE, "too_short")


def test_speech_that_lasts_interrupts_by_duration_and_a_silent_wait_times_out() -> None:
    judge = OverlapJudge(rules(by_words=False, min_duration_ms=500.0), onset_ms=1000.0)
    assert judge.speaking(1400.0) is None
    verdict = judge.speaking(1500.0)
    assert verdict is not None
    assert (verdict.verdict, verdict.reason) == (Verdict.MEANT, "min_duration")
    waiting = OverlapJudge(rules(timeout_ms=1000.0), onset_ms=0.0)
    waiting.paused(400.0, now_ms=500.0)
    assert waiting.tick(1399.0) is None  # no words came, but the wait is not over
    verdict = waiting.tick(1400.0)
    assert verdict is not None and verdict.reason == "false_interruption_timeout"


def test_words_from_before_more_speech_are_not_the_whole() -> None:
    judge = OverlapJudge(rules(min_words=3), onset_ms=0.0)
    judge.paused(300.0, now_ms=350.0)
    judge.speaking(500.0)  # the speech went on
    assert judge.heard("Yeah.", now_ms=520.0, upto_ms=300.0) is None  # not up to a pause now
    judge.paused(900.0, now_ms=950.0)
    assert judge.heard("Yeah.", now_ms=1000.0, upto_ms=300.0) is None  # an older pause's words
    verdict = judge.heard("Yeah, no, okay.", now_ms=1100.0, upto_ms=900.0)
    assert verdict is not None and verdict.reason == "too_few_words"


def test_the_idle_timer_counts_silence_after_the_answer_was_heard() -> None:
    timer = IdleTimer(timeout_ms=5000.0)
    assert not timer.due(1e9)  # nothing was answered yet
    assert heard_by(first_audio=10.0, sent_ms=3000.0, now=12.0) == pytest.approx(1000.0)
    assert heard_by(first_audio=None, sent_ms=0.0) == 0.0
    timer.arm(since_ms=2000.0 + 1000.0)
    assert not timer.due(7999.0) and timer.due(8000.0)
    timer.stop()
    assert not timer.due(9000.0)
    never = IdleTimer(timeout_ms=0.0)
    never.arm(0.0)
    assert not never.due(1e9)


def test_the_sound_decides_first_while_the_words_are_read_and_the_words_settle_it() -> None:
    # Until the words are read the reader counts as "unfinished" (UNREAD): a turn that sounds
    # finished gets a wait in the middle of the scale, longer than the fixed silence, shorter
    # than a turn that sounds unfinished gets.
    sounds_done = Judgement(sound=1.0, reading=True)
    assert sounds_done.probability == pytest.approx(SOUND_WEIGHT + (1 - SOUND_WEIGHT) * UNREAD)
    first_wait = wait_ms(sounds_done.probability, AUTO)
    assert AUTO.unjudged_ms < first_wait < AUTO.longest_ms / 4
    assert wait_ms(Judgement(sound=0.2, reading=True).probability, AUTO) > 2 * first_wait
    timer = TurnEndTimer(pb.EAGERNESS_AUTO)
    timer.paused(1000.0)
    first = timer.judged(1000.0, sounds_done, now_ms=1100.0)
    assert first is not None and first.wait_ms == first_wait
    event = first.event("i", pb.EAGERNESS_AUTO, "").turn_end_decision
    assert event.sound_probability == 1.0 and not event.HasField("words_probability")
    # The words come and read finished: the wait shrinks to the shortest.
    settled = timer.judged(1000.0, Judgement(sound=1.0, words=1.0), now_ms=1250.0)
    assert settled is not None and settled.wait_ms == AUTO.finished_ms < first_wait
    assert timer.due(1250.0)
