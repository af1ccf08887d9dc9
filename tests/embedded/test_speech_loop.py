"""The embedded engine with real speech: espeak-ng talks, Silero hears, Whisper writes it down,
the echo responder answers, and espeak-ng's answer is checked by Whisper again.

Timing claims are held to the audio itself: the scenes know where their speech truly starts
and ends, and the input clock says how much audio the engine had heard when it acted. What
Whisper heard is compared with what was said tolerantly (``hearing.heard_as``): its words for
synthetic speech differ between machines. The echo responder's answer is compared exactly with
what Whisper heard: that holds on every machine.
"""

from __future__ import annotations

import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.wire import pb

from .conftest import speech
from .driver import Driver, open_driver, response_events, retranscribe, said, spoken
from .hearing import heard_as, words

TOLERANCE_MS = 150.0


def echo(heard: str) -> str:
    """The words the echo responder answers a turn heard as ``heard`` with."""
    return words(f"you said {heard}")


async def test_a_spoken_question_gets_a_spoken_answer(engine: EmbeddedEngine) -> None:
    scene = speech.standard_scenes()["question"]
    ((true_start, true_end, question),) = scene.segments
    driver = await open_driver(engine)
    try:
        await driver.stream(scene.pcm16())
        done = (await driver.until("response_done")).response_done.response
    finally:
        await driver.close()

    order = driver.kinds()
    expected = [
        "speech_started",
        "speech_stopped",
        "input_committed",
        "item_added",
        "input_transcription",
        "item_done",
        "response_created",
        "output_audio_delta",
        "output_audio_transcript_delta",
    ]
    assert [order.index(kind) for kind in expected] == sorted(order.index(k) for k in expected)
    started = driver.of("speech_started")[0].speech_started
    stopped = driver.of("speech_stopped")[0].speech_stopped
    assert abs(started.audio_start_ms - true_start) <= TOLERANCE_MS
    assert abs(stopped.audio_end_ms - true_end) <= TOLERANCE_MS
    committed = driver.of("input_committed")[0].input_committed
    assert started.item_id == stopped.item_id == committed.item_id
    heard = driver.of("input_transcription")[0].input_transcription
    assert heard_as(question, heard.transcript), heard.transcript
    user_item = driver.of("item_done")[0].item_done.item
    assert user_item.content[0].transcript == heard.transcript

    assert done.status == pb.RESPONSE_STATUS_COMPLETED
    answer = response_events(driver.seen, done.id)
    deltas = [e.output_audio_delta for e in answer if e.HasField("output_audio_delta")]
    clock = 0.0
    for delta in deltas:  # bounded chunks, back to back on the response's media clock
        assert (delta.encoding, delta.sample_rate_hz) == (pb.AUDIO_ENCODING_PCM16, 24000)
        assert delta.start_ms == pytest.approx(clock)
        assert 0 < delta.duration_ms <= 100.0 + 1e-6
        clock += delta.duration_ms
    text = said(answer)
    assert words(text) == echo(heard.transcript)
    (item,) = done.output
    assert item.content[0].transcript == text
    assert item.content[0].audio_duration_ms == pytest.approx(clock)
    assert done.usage.output_audio_ms == pytest.approx(clock)
    assert 0 < done.latency.first_audio_ms <= done.latency.total_ms

    heard_back = retranscribe(engine, spoken(answer))
    assert heard_as(text, heard_back), heard_back


async def test_each_pause_ends_a_turn(engine: EmbeddedEngine) -> None:
    scene = speech.standard_scenes()["two_turns"]
    # A client streams in real time, so the first answer starts before the second turn is
    # spoken; here the second half of the audio waits for the first answer instead.
    middle = round((scene.segments[0][1] + scene.segments[1][0]) / 2) * 32
    pcm = scene.pcm16()
    driver = await open_driver(engine)
    try:
        await driver.stream(pcm[:middle])
        await driver.until("response_done")
        await driver.stream(pcm[middle:])
        await driver.until("response_done", lambda e: len(driver.of("response_done")) == 2)
    finally:
        await driver.close()
    starts = [e.speech_started.audio_start_ms for e in driver.of("speech_started")]
    stops = [e.speech_stopped.audio_end_ms for e in driver.of("speech_stopped")]
    assert len(starts) == len(stops) == 2
    for (true_start, true_end, _), start, stop in zip(scene.segments, starts, stops, strict=True):
        assert abs(start - true_start) <= TOLERANCE_MS
        assert abs(stop - true_end) <= TOLERANCE_MS
    transcripts = [
        words(e.input_transcription.transcript) for e in driver.of("input_transcription")
    ]
    assert len(transcripts) == 2
    for (_, _, phrase), transcript in zip(scene.segments, transcripts, strict=True):
        assert heard_as(phrase, transcript), transcript
    answers = [
        said(response_events(driver.seen, e.response_done.response.id))
        for e in driver.of("response_done")
    ]
    assert [words(a) for a in answers] == [echo(t) for t in transcripts]


async def start_answer(engine: EmbeddedEngine, **config: object) -> tuple[Driver, str]:
    """A session answering the question in real time; returns it once the answer sounds."""
    driver = await open_driver(engine, pace="realtime", **config)
    await driver.stream(speech.standard_scenes()["question"].pcm16())
    created = await driver.until("response_created")
    await driver.until("output_audio_delta")
    return driver, created.response_created.response.id


async def test_speech_over_the_answer_cancels_it_within_one_window(engine: EmbeddedEngine) -> None:
    driver, first = await start_answer(engine)
    try:
        # A voiced onset: Silero hears voice, and an opening "s" would be heard only from the
        # vowel on (the hiss alone scores like noise).
        interruption = speech.Scene().pause(300).speak("wait, I have another question").pause(800)
        onset = driver.session.input_clock_ms + interruption.segments[0][0]

        def cancelled() -> bool:
            return any(e.response_done.response.id == first for e in driver.of("response_done"))

        landed = await driver.stream(interruption.pcm16(), chunk_ms=32, step=True, stop=cancelled)
        second = await driver.until("response_done", lambda e: e.response_done.response.id != first)
    finally:
        await driver.close()

    assert landed is not None, "the answer was never cancelled"
    assert onset <= landed <= onset + TOLERANCE_MS, (onset, landed)
    starts = driver.of("speech_started")
    assert abs(starts[-1].speech_started.audio_start_ms - onset) <= TOLERANCE_MS
    (decision,) = driver.of("overlap_decision")
    assert decision.overlap_decision.action == pb.OVERLAP_ACTION_BARGE_IN
    done = next(
        e.response_done.response
        for e in driver.of("response_done")
        if e.response_done.response.id == first
    )
    assert (done.status, done.status_reason) == (pb.RESPONSE_STATUS_CANCELLED, "turn_detected")
    order = driver.kinds()
    assert order.index("overlap_decision") < driver.seen.index(
        next(e for e in driver.of("response_done") if e.response_done.response.id == first)
    )
    # Nothing of the old answer after its end, and its item holds what went out: a prefix.
    old = response_events(driver.seen, first)
    assert old[-1].HasField("response_done")
    question, interrupting = (e.input_transcription for e in driver.of("input_transcription"))
    full = echo(question.transcript)
    delivered = said(old)
    assert done.output[0].content[0].transcript == delivered
    assert full.startswith(words(delivered)) and len(words(delivered)) < len(full)
    assert done.output[0].status == pb.ITEM_STATUS_INCOMPLETE
    # The interruption is the next turn: heard as what was said over the answer, and answered.
    assert interrupting.item_id == starts[-1].speech_started.item_id
    ((_, _, phrase),) = interruption.segments
    assert heard_as(phrase, interrupting.transcript), interrupting.transcript
    assert second.response_done.response.status == pb.RESPONSE_STATUS_COMPLETED
    answer = said(response_events(driver.seen, second.response_done.response.id))
    assert words(answer) == echo(interrupting.transcript)


async def test_noise_bursts_do_not_interrupt(engine: EmbeddedEngine) -> None:
    driver, first = await start_answer(engine)
    try:
        await driver.stream(
            speech.standard_scenes()["noise_bursts"].pcm16(), chunk_ms=32, step=True
        )
        done = (await driver.until("response_done")).response_done.response
    finally:
        await driver.close()
    assert done.id == first
    assert done.status == pb.RESPONSE_STATUS_COMPLETED
    assert len(driver.of("speech_started")) == 1  # the question's own
    assert not driver.of("overlap_decision")


async def test_listen_only_lets_the_answer_finish_then_answers_the_overlap(
    engine: EmbeddedEngine,
) -> None:
    driver, first = await start_answer(engine, overlap_policy=pb.OVERLAP_POLICY_LISTEN_ONLY)
    try:
        interruption = speech.Scene().pause(200).speak("and the kitchen lights").pause(800)
        await driver.stream(interruption.pcm16(), chunk_ms=32, step=True)
        second = await driver.until("response_done", lambda e: e.response_done.response.id != first)
    finally:
        await driver.close()
    (decision,) = driver.of("overlap_decision")
    assert decision.overlap_decision.action == pb.OVERLAP_ACTION_LISTEN
    dones = driver.of("response_done")
    assert [d.response_done.response.status for d in dones] == [
        pb.RESPONSE_STATUS_COMPLETED,
        pb.RESPONSE_STATUS_COMPLETED,
    ]
    assert dones[0].response_done.response.id == first
    second_created = next(
        e
        for e in driver.of("response_created")
        if e.response_created.response.id == second.response_done.response.id
    )
    assert driver.seen.index(dones[0]) < driver.seen.index(second_created)
    overlap = driver.of("input_transcription")[-1].input_transcription
    ((_, _, phrase),) = interruption.segments
    assert heard_as(phrase, overlap.transcript), overlap.transcript
    answer = said(response_events(driver.seen, second.response_done.response.id))
    assert words(answer) == echo(overlap.transcript)


async def test_without_turn_detection_the_client_commits(engine: EmbeddedEngine) -> None:
    none = pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_NONE)
    driver = await open_driver(engine, turn_detection=none)
    try:
        await driver.stream(speech.standard_scenes()["question"].pcm16(), step=True)
        assert "speech_started" not in driver.kinds()
        assert "response_created" not in driver.kinds()
        await driver.send(commit_input_audio=pb.CommitInputAudio())
        done = (await driver.until("response_done")).response_done.response
    finally:
        await driver.close()
    heard = driver.of("input_transcription")[0].input_transcription.transcript
    assert heard_as("what is the capital of france", heard), heard
    assert words(done.output[0].content[0].transcript) == echo(heard)


async def test_playback_ack_with_truncate_keeps_only_what_was_heard(engine: EmbeddedEngine) -> None:
    driver = await open_driver(engine)
    try:
        await driver.stream(speech.standard_scenes()["question"].pcm16())
        done = (await driver.until("response_done")).response_done.response
        item_id = done.output[0].id
        await driver.send(ack_playback=pb.AckPlayback(played_ms=900.0, truncate=True))
        ack = (await driver.until("playback_acknowledged")).playback_acknowledged
        await driver.send(retrieve_conversation_item=pb.RetrieveConversationItem(item_id=item_id))
        kept = (await driver.until("item_retrieved")).item_retrieved.item
    finally:
        await driver.close()
    assert (ack.item_id, ack.committed_ms, ack.truncate) == (item_id, 900.0, True)
    part = kept.content[0]
    assert part.audio_duration_ms == 900.0
    full = done.output[0].content[0].transcript
    assert full.startswith(part.transcript) and 0 < len(part.transcript) < len(full)
    # The text kept is the text of the chunks that ended by 900 ms.
    answer = response_events(driver.seen, done.id)
    heard = ""
    for audio_event, text_event in zip(answer[1::2], answer[2::2], strict=False):
        if not audio_event.HasField("output_audio_delta"):
            break
        delta = audio_event.output_audio_delta
        if delta.start_ms + delta.duration_ms > 900.0 + 1e-6:
            break
        heard += text_event.output_audio_transcript_delta.delta
    assert part.transcript == heard


async def test_text_only_responses_write_instead_of_speaking(engine: EmbeddedEngine) -> None:
    driver = await open_driver(engine, output_modalities=[pb.MODALITY_TEXT])
    try:
        await driver.send(append_input_text=pb.AppendInputText(text="hello there"))
        await driver.send(create_response=pb.CreateResponse())
        done = (await driver.until("response_done")).response_done.response
    finally:
        await driver.close()
    text = "".join(e.output_text_delta.delta for e in driver.of("output_text_delta"))
    assert text == "You said: hello there."
    assert not driver.of("output_audio_delta")
    assert done.output[0].content[0].text == text


async def test_bad_session_engine_options_are_reported(engine: EmbeddedEngine) -> None:
    driver = await open_driver(engine, pace="sideways")
    try:
        error = (await driver.until("error")).error
    finally:
        await driver.close()
    assert (error.code, error.param) == ("invalid_session_config", "engine_options")


async def test_under_ack_only_the_model_reads_only_what_was_played(
    engine: EmbeddedEngine,
) -> None:
    driver = await open_driver(engine, playback_commit_policy=pb.PLAYBACK_COMMIT_POLICY_ACK_ONLY)
    try:
        await driver.stream(speech.standard_scenes()["question"].pcm16())
        done = (await driver.until("response_done")).response_done.response
        unplayed = driver.session._conversation()
        await driver.send(ack_playback=pb.AckPlayback(played_ms=900.0))
        await driver.until("playback_acknowledged")
        played = driver.session._conversation()
    finally:
        await driver.close()
    full = done.output[0].content[0].transcript
    heard = driver.of("input_transcription")[0].input_transcription.transcript
    assert unplayed[-1] == ("user", heard)  # nothing of the answer heard yet
    role, text = played[-1]
    assert role == "assistant" and full.startswith(text) and 0 < len(text) < len(full)
