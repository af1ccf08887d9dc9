"""Turn-taking with real speech through the real detector: a hesitation that does not end the
turn, a question that ends it sooner than a fixed silence, a backchannel over a reply that
pauses it and resumes it where the listener stopped hearing it, an interruption that ends it,
and an idle prompt.

Audio is stepped with ``drained``: after each chunk the engine's background work (the pause's
transcription, SmolLM2's judgement) is done before the next, so what is asserted depends on the
audio alone, not on this machine's speed. Times are on the input clock, held to the scenes'
true speech edges.
"""

from __future__ import annotations

import itertools

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.engine.embedded.responder import STILL_THERE
from omni_grpc.engine.kit.end_of_turn import WAITS
from omni_grpc.engine.kit.vad import WINDOW_MS
from omni_grpc.wire import pb

from .conftest import speech
from .driver import Driver, open_driver, response_events, said
from .hearing import heard_as, words

TOLERANCE_MS = 150.0
SEMANTIC = pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SEMANTIC_VAD, eagerness=pb.EAGERNESS_AUTO)
HESITATION = (
    speech.Scene().pause(500).speak("I want to fly to").pause(1000).speak("Boston on Friday")
)
# Speech over a reply that is judged, with the reply held while it is.
JUDGED = pb.InterruptionConfig(mode=pb.INTERRUPTION_MODE_WORDS, resume_false_interruption=True)


def decisions(driver: Driver) -> list[pb.OverlapDecision]:
    return [e.overlap_decision for e in driver.of("overlap_decision")]


def last_decisions(driver: Driver) -> list[pb.TurnEndDecision]:
    """The last decision of each pause: a pause may be decided first on its sound alone while
    its words are read (no words_probability), then on both, unless the turn ended first."""
    last: dict[float, pb.TurnEndDecision] = {}
    for event in driver.of("turn_end_decision"):
        decision = event.turn_end_decision
        last[decision.audio_end_ms] = decision
    return list(last.values())


def settled(driver: Driver) -> list[pb.TurnEndDecision]:
    """The last decisions that read the words too."""
    return [d for d in last_decisions(driver) if d.HasField("words_probability")]


async def test_a_hesitation_inside_a_sentence_does_not_end_the_turn(engine: EmbeddedEngine) -> None:
    scene = HESITATION.pause(1500)
    driver = await open_driver(engine, turn_detection=SEMANTIC)
    try:
        await driver.stream(scene.pcm16(), drained=True)
        await driver.until("input_transcription")
    finally:
        await driver.close()
    ((_, first_end, _), (_, true_end, _)) = scene.segments
    (committed,) = driver.of("input_committed")
    transcript = driver.of("input_transcription")[0].input_transcription.transcript
    assert heard_as("I want to fly to Boston on Friday", transcript), transcript
    hesitation, end = last_decisions(driver)
    assert hesitation.HasField("words_probability")  # read while the turn waited
    # "I want to fly to" sounds unfinished: the wait is longer than the hesitation was.
    assert hesitation.probability < 0.5 and hesitation.wait_ms > 1000, hesitation
    assert hesitation.item_id == end.item_id == committed.input_committed.item_id
    # The words judged at the turn's last pause are the turn's own transcript (started there),
    # not a quicker, rougher reading of it.
    if end.HasField("words_probability"):
        assert end.transcript == transcript, (end.transcript, transcript)
    stopped = driver.of("speech_stopped")[0].speech_stopped
    assert abs(stopped.audio_end_ms - true_end) <= TOLERANCE_MS
    assert abs(first_end - hesitation.audio_end_ms) <= TOLERANCE_MS
    assert abs(true_end - end.audio_end_ms) <= TOLERANCE_MS


async def test_a_fixed_silence_answers_the_hesitation_half_way(engine: EmbeddedEngine) -> None:
    driver = await open_driver(engine)  # server VAD, 500 ms
    try:
        await driver.stream(HESITATION.pause(1500).pcm16(), drained=True)
    finally:
        await driver.close()
    assert len(driver.of("input_committed")) == 2
    assert not driver.of("turn_end_decision")


async def ended_at(engine: EmbeddedEngine, detection: pb.TurnDetection) -> tuple[float, Driver]:
    """Where on the input clock a spoken question's turn ended, after its true end."""
    scene = speech.standard_scenes()["question"]
    driver = await open_driver(engine, turn_detection=detection)
    try:
        landed = await driver.stream(
            scene.pcm16(), drained=True, stop=lambda: bool(driver.of("input_committed"))
        )
    finally:
        await driver.close()
    assert landed is not None, "the turn never ended"
    return landed - scene.segments[0][1], driver


async def test_a_finished_question_ends_its_turn_sooner_than_the_fixed_silence(
    engine: EmbeddedEngine,
) -> None:
    semantic_ms, driver = await ended_at(engine, SEMANTIC)
    fixed_ms, _ = await ended_at(engine, pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SERVER_VAD))
    decisions = [e.turn_end_decision for e in driver.of("turn_end_decision")]
    assert len({d.audio_end_ms for d in decisions}) == 1  # one pause, decided once or twice
    # The turn ended on the last decision: on both judges where the words came within the wait
    # the sound alone chose, sooner than the fixed silence; on the sound alone where the
    # machine was too busy for that, after the middle of the scale's wait.
    ended_by = decisions[-1]
    assert ended_by.eagerness == pb.EAGERNESS_AUTO
    assert ended_by.sound_probability > 0.5, ended_by  # it sounds finished
    assert semantic_ms <= max(ended_by.wait_ms, ended_by.decided_ms) + TOLERANCE_MS
    read = settled(driver)
    if read:
        (judged,) = read
        assert judged.probability >= 0.9 and judged.transcript  # a whole question
        assert judged.wait_ms == WAITS[pb.EAGERNESS_AUTO].finished_ms < 500.0 <= fixed_ms
    else:
        assert ended_by.wait_ms < WAITS[pb.EAGERNESS_AUTO].longest_ms / 4


async def start_answer(engine: EmbeddedEngine, **config: object) -> tuple[Driver, str]:
    """A session answering the question in real time; returns it once the answer sounds."""
    driver = await open_driver(engine, pace="realtime", **config)
    await driver.stream(speech.standard_scenes()["question"].pcm16())
    created = await driver.until("response_created")
    await driver.until("output_audio_delta")
    return driver, created.response_created.response.id


async def test_a_backchannel_pauses_the_reply_which_resumes_where_it_was_heard(
    engine: EmbeddedEngine,
) -> None:
    driver, first = await start_answer(engine, interruption=JUDGED)
    heard_ms = None
    try:
        scene = speech.Scene().pause(200).speak("yeah").pause(900)
        pcm, size = scene.pcm16(), 20 * 32
        for start in range(0, len(pcm), size):
            await driver.send(
                append_input_audio=pb.AppendInputAudio(audio=pcm[start : start + size])
            )
            await driver.session.drained()
            paused = [d for d in decisions(driver) if d.action == pb.OVERLAP_ACTION_PAUSE]
            if paused and heard_ms is None:  # the listener stops, 150 ms short of what it had
                heard_ms = max(0.0, paused[0].audio_ms - 150.0)
                await driver.send(ack_playback=pb.AckPlayback(played_ms=heard_ms))
        done = (await driver.until("response_done")).response_done.response
    finally:
        await driver.close()
    pause, resume = decisions(driver)
    assert (pause.action, pause.reason, pause.response_id) == (
        pb.OVERLAP_ACTION_PAUSE,
        "overlap",
        first,
    )
    assert (resume.action, resume.reason) == (pb.OVERLAP_ACTION_RESUME, "backchannel")
    assert resume.audio_ms == heard_ms and resume.transcript
    assert (done.id, done.status) == (first, pb.RESPONSE_STATUS_COMPLETED)
    # The backchannel was no turn: heard, closed, dropped.
    assert len(driver.of("input_committed")) == 1
    backchannel = driver.of("speech_started")[-1].speech_started.item_id
    assert driver.of("speech_stopped")[-1].speech_stopped.item_id == backchannel
    # What the listener plays: everything up to where it stopped, then the rest from there,
    # each moment of the reply once, to its end. (Positions by identity: a replayed chunk is
    # equal to the one sent before it.)
    resumed_at = next(i for i, e in enumerate(driver.seen) if e.overlap_decision == resume)
    audio = [
        (i, e.output_audio_delta)
        for i, e in enumerate(driver.seen)
        if e.HasField("output_audio_delta") and e.output_audio_delta.response_id == first
    ]
    heard = []
    for i, delta in audio:
        end = delta.start_ms + delta.duration_ms
        if i < resumed_at and delta.start_ms < heard_ms:  # played, up to where it stopped
            heard.append((delta.start_ms, min(end, heard_ms)))
        elif i > resumed_at:  # sent (again) after the resume
            heard.append((delta.start_ms, end))
    assert heard[0][0] == 0.0 and heard[-1][1] == done.usage.output_audio_ms
    assert all(abs(a[1] - b[0]) < 1e-6 for a, b in itertools.pairwise(heard)), heard
    events = response_events(driver.seen, first)
    assert words(said(events)) == words(done.output[0].content[0].transcript)


async def test_speech_over_a_held_reply_holds_it_after_one_window(engine: EmbeddedEngine) -> None:
    # A reply that a false interruption resumes is held on a shorter bar than a turn starts on
    # (overlap_min_speech_ms, 32 ms: one VAD window, against min_speech_ms's 64): the reply
    # stops that much sooner, and a cough the bar lets through is resumed.
    driver, first = await start_answer(engine, interruption=JUDGED)
    try:

        def held() -> bool:
            return any(d.action == pb.OVERLAP_ACTION_PAUSE for d in decisions(driver))

        scene = speech.Scene().pause(200).speak("yeah").pause(900)
        held_at = await driver.stream(scene.pcm16(), step=True, stop=held)
        await driver.until("response_done")
    finally:
        await driver.close()
    onset = driver.of("speech_started")[-1].speech_started.audio_start_ms
    assert held_at is not None
    assert decisions(driver)[0].response_id == first
    # Confirmed at the end of the onset's window (32 ms), heard with the 20 ms chunk that
    # completes it; min_speech_ms's bar would have taken another window.
    assert held_at - onset <= WINDOW_MS + 20, (held_at, onset)


async def test_words_over_the_reply_end_it_and_are_the_next_turn(engine: EmbeddedEngine) -> None:
    driver, first = await start_answer(engine, interruption=JUDGED)
    try:
        interruption = speech.Scene().pause(300).speak("no wait, I meant Tuesday").pause(900)
        onset = driver.session.input_clock_ms + interruption.segments[0][0]
        await driver.stream(interruption.pcm16(), drained=True)
        second = await driver.until("response_done", lambda e: e.response_done.response.id != first)
    finally:
        await driver.close()
    pause, cut = decisions(driver)
    assert pause.action == pb.OVERLAP_ACTION_PAUSE
    assert (cut.action, cut.reason) == (pb.OVERLAP_ACTION_BARGE_IN, "min_words")
    starts = driver.of("speech_started")
    assert abs(starts[-1].speech_started.audio_start_ms - onset) <= TOLERANCE_MS
    # The reply's audio stopped at the pause: none of it after, and it ended cut.
    paused_at = next(i for i, e in enumerate(driver.seen) if e.overlap_decision == pause)
    assert not [
        e
        for e in driver.seen[paused_at:]
        if e.HasField("output_audio_delta") and e.output_audio_delta.response_id == first
    ]
    events = response_events(driver.seen, first)
    done = events[-1].response_done.response
    assert (done.status, done.status_reason) == (pb.RESPONSE_STATUS_CANCELLED, "turn_detected")
    heard = driver.of("input_transcription")[-1].input_transcription
    assert heard.item_id == starts[-1].speech_started.item_id
    assert heard_as("no wait I meant Tuesday", heard.transcript), heard.transcript
    assert second.response_done.response.status == pb.RESPONSE_STATUS_COMPLETED


async def test_short_speech_over_the_reply_is_dropped_without_pausing_it(
    engine: EmbeddedEngine,
) -> None:
    rules = pb.InterruptionConfig(min_duration_ms=700)  # by any speech that long, no resume
    driver, first = await start_answer(engine, interruption=rules)
    try:
        await driver.stream(
            speech.Scene().pause(200).speak("okay").pause(700).pcm16(), drained=True
        )
        done = (await driver.until("response_done")).response_done.response
    finally:
        await driver.close()
    (dropped,) = decisions(driver)
    assert (dropped.action, dropped.reason) == (pb.OVERLAP_ACTION_DROP, "too_short")
    assert (done.id, done.status) == (first, pb.RESPONSE_STATUS_COMPLETED)
    assert len(driver.of("input_committed")) == 1


async def test_a_silent_user_is_prompted_once_after_the_idle_timeout(
    engine: EmbeddedEngine,
) -> None:
    detection = pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_SERVER_VAD, idle_timeout_ms=1500)
    driver = await open_driver(engine, turn_detection=detection)
    try:
        await driver.stream(speech.standard_scenes()["question"].pcm16(), drained=True)
        first = (await driver.until("response_done")).response_done.response
        await driver.stream(bytes(6000 * 32), drained=True)
        prompt = await driver.until(
            "response_done", lambda e: e.response_done.response.id != first.id
        )
    finally:
        await driver.close()
    (triggered,) = [e.idle_timeout_triggered for e in driver.of("idle_timeout_triggered")]
    assert triggered.audio_end_ms - triggered.audio_start_ms >= 1500
    committed = driver.of("input_committed")[-1].input_committed
    assert committed.item_id == triggered.item_id
    kinds = driver.kinds()
    assert kinds.index("idle_timeout_triggered") < len(kinds) - 1 - kinds[::-1].index(
        "input_committed"
    )
    assert prompt.response_done.response.output[0].content[0].transcript == STILL_THERE
    assert len(driver.of("response_done")) == 2  # once per silence
