"""What the loopback engine in particular says and does, beyond the conformance suite."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import numpy as np
import pytest

from omni_grpc import audio
from omni_grpc.core.commands import BargeIn, engine_command
from omni_grpc.engine import create_engine
from omni_grpc.engine.base import EngineError
from omni_grpc.engine.loopback import LoopbackEngine, LoopbackOptions
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import SUPPORTED_RATES_HZ
from tests.serving import eventually

from .conformance import (
    IN_RATE,
    OUT_RATE,
    EngineSpec,
    Probe,
    ScheduleClock,
    audio_ms,
    check_lifecycles,
    default_config,
    kinds,
    open_probe,
    run_turn,
    transcript,
    voice_like,
)


def sine(freq_hz: float, seconds: float, rate_hz: int) -> np.ndarray:
    t = np.arange(int(rate_hz * seconds)) / rate_hz
    return (0.5 * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


def peak_hz(pcm16: bytes, rate_hz: int) -> float:
    samples = audio.decode(pcm16, pb.AUDIO_ENCODING_PCM16, rate_hz)
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / rate_hz)[spectrum.argmax()])


async def loopback_probe(
    options: dict[str, str], clock: ScheduleClock | None = None
) -> tuple[LoopbackEngine, Probe]:
    engine = LoopbackEngine(options, clock=clock) if clock else LoopbackEngine(options)
    return engine, await open_probe(engine, EngineSpec("loopback", lambda: engine))


@pytest.fixture
async def probe() -> AsyncIterator[Probe]:
    engine, opened = await loopback_probe({"pace": "fast"})
    yield opened
    await engine.stop()


def error_code(event: pb.ConverseResponse) -> str:
    assert event.HasField("error"), kinds([event])
    return event.error.code


async def test_the_answer_is_the_turn_played_back(probe: Probe) -> None:
    heard = audio.encode(sine(440.0, 1.0, IN_RATE), pb.AUDIO_ENCODING_PCM16, IN_RATE)
    await probe.append(heard)
    await probe.send(commit_input_audio=pb.CommitInputAudio())
    events = await probe.until("response_done")
    (answer,) = check_lifecycles(events).values()
    played = b"".join(
        e.output_audio_delta.audio for e in answer if e.HasField("output_audio_delta")
    )
    expected = audio.resample(
        audio.decode(heard, pb.AUDIO_ENCODING_PCM16, IN_RATE), IN_RATE, OUT_RATE
    )
    assert played == audio.encode(expected, pb.AUDIO_ENCODING_PCM16, OUT_RATE)
    assert peak_hz(played, OUT_RATE) == pytest.approx(440.0, abs=1.0)
    durations = [
        e.output_audio_delta.duration_ms for e in answer if e.HasField("output_audio_delta")
    ]
    assert durations == [100.0] * 10
    assert kinds(answer)[1:3] == ["output_audio_delta", "output_audio_transcript_delta"]
    assert transcript(answer) == "you said 1.00 seconds of audio"
    done = answer[-1].response_done.response
    assert (done.status_reason, done.usage.output_tokens) == ("stop", 6)
    assert done.usage.input_tokens == 10  # one per 100 ms of input


async def test_realtime_pace_takes_as_long_as_the_audio() -> None:
    clock = ScheduleClock()  # the engine's schedule, read without waiting for it
    engine, probe = await loopback_probe({"pace": "realtime"}, clock)
    try:
        await probe.append(voice_like(1.0))
        started = clock.now()
        await probe.send(commit_input_audio=pb.CommitInputAudio())
        events = await probe.until("response_done")
        elapsed = clock.now() - started
    finally:
        await engine.stop()
    assert audio_ms(events) == pytest.approx(1000.0)
    # Each 100 ms chunk is due when it is "generated": the first 100 ms after the commit.
    assert clock.sleeps == pytest.approx([0.1] * 10)
    assert elapsed == pytest.approx(1.0)
    latency = events[-1].response_done.response.latency
    assert latency.first_audio_ms == pytest.approx(100.0)
    assert latency.total_ms == pytest.approx(1000.0)
    assert latency.real_time_factor == pytest.approx(1.0)


async def test_a_reader_that_falls_behind_gets_the_rest_on_schedule_not_in_a_burst() -> None:
    # 1 s of audio is 10 chunks of two events each; the event queue holds 8, so the player
    # waits for room while the reader is away.
    clock = ScheduleClock()
    engine = LoopbackEngine({"pace": "realtime", "queue_size": "8"}, clock=clock)
    session = await engine.open_session("s", default_config(engine))
    try:
        for chunk in audio.chunk_pcm16(voice_like(1.0), IN_RATE // 10 * 2):
            await session.submit(
                engine_command(
                    pb.ConverseRequest(append_input_audio=pb.AppendInputAudio(audio=chunk))
                )
            )
        await session.submit(
            engine_command(pb.ConverseRequest(commit_input_audio=pb.CommitInputAudio()))
        )
        # The turn's four events and two chunks fill the queue; the third chunk waits for room.
        await eventually(lambda: session.queue_depths()[1] == 8)
        assert clock.sleeps == pytest.approx([0.1] * 3)
        clock.advance(0.6)  # the reader is away for six chunks' time
        back, paced = clock.now(), len(clock.sleeps)
        async for event in session.events():
            if event.HasField("response_done"):
                break
        after = clock.now() - back
    finally:
        await engine.stop()
    # The schedule restarts from the late chunk: the seven chunks after the one that waited
    # come 100 ms apart (a burst of the backlog would come at once: six already due, the
    # last 100 ms after the reader came back).
    assert clock.sleeps[paced:] == pytest.approx([0.1] * 7)
    assert after == pytest.approx(0.7)


async def test_a_commit_that_does_not_say_follows_turn_detection(probe: Probe) -> None:
    config = default_config(LoopbackEngine())
    config.turn_detection.create_response = False
    await probe.send(update_session=pb.UpdateSession(config=config))
    await probe.append(voice_like(0.3))
    await probe.send(commit_input_audio=pb.CommitInputAudio())
    assert kinds(await probe.until("item_done")) == ["input_committed", "item_added", "item_done"]
    assert await probe.quiet(0.2) == []
    await probe.send(create_response=pb.CreateResponse())
    done = (await probe.until("response_done"))[-1].response_done.response
    assert done.status == pb.RESPONSE_STATUS_COMPLETED
    assert done.usage.input_audio_ms == pytest.approx(300.0)


async def test_speed_and_chunk_ms_shape_the_output() -> None:
    clock = ScheduleClock()
    engine, probe = await loopback_probe({"speed": "4", "chunk_ms": "250"}, clock)
    try:
        started = clock.now()
        events = await run_turn(probe, 1.0)
        elapsed = clock.now() - started
    finally:
        await engine.stop()
    durations = [
        e.output_audio_delta.duration_ms for e in events if e.HasField("output_audio_delta")
    ]
    assert durations == [250.0] * 4
    # A 250 ms chunk at four times real time is due every 62.5 ms: 1 s of audio in 0.25 s.
    assert clock.sleeps == pytest.approx([0.0625] * 4)
    assert elapsed == pytest.approx(0.25)


async def test_a_text_turn_is_answered_with_a_tone(probe: Probe) -> None:
    await probe.send(append_input_text=pb.AppendInputText(text="hello there"))
    added = (await probe.until("item_done"))[-1].item_done.item
    assert added.role == pb.ITEM_ROLE_USER
    assert added.content[0].type == pb.CONTENT_TYPE_INPUT_TEXT
    await probe.send(create_response=pb.CreateResponse())
    events = await probe.until("response_done")
    played = b"".join(
        e.output_audio_delta.audio for e in events if e.HasField("output_audio_delta")
    )
    assert transcript(events) == 'you wrote "hello there"'
    assert peak_hz(played, OUT_RATE) == pytest.approx(440.0, abs=2.0)
    assert audio_ms(events) == pytest.approx(11 * 60.0)


async def test_text_only_sessions_get_text_deltas(probe: Probe) -> None:
    config = default_config(LoopbackEngine())
    config.output_modalities[:] = [pb.MODALITY_TEXT]
    await probe.send(update_session=pb.UpdateSession(config=config))
    events = await run_turn(probe, 0.5)
    assert "output_audio_delta" not in kinds(events)
    text = "".join(e.output_text_delta.delta for e in events if e.HasField("output_text_delta"))
    assert text == "you said 0.50 seconds of audio"
    assert events[-1].response_done.response.output[0].content[0].text == text


async def test_a_cancel_takes_back_output_nobody_has_read() -> None:
    engine = LoopbackEngine({"pace": "fast", "queue_size": "8", "chunk_ms": "5000"})
    session = await engine.open_session("s", default_config(engine))
    try:
        await session.submit(
            engine_command(
                pb.ConverseRequest(
                    client_seq=1, append_input_audio=pb.AppendInputAudio(audio=voice_like(20.0))
                )
            )
        )
        await session.submit(
            engine_command(
                pb.ConverseRequest(client_seq=2, commit_input_audio=pb.CommitInputAudio())
            )
        )
        # Nobody reads: the answer fills the bounded queue and waits.
        await eventually(lambda: session.queue_depths()[1] == 8)
        await session.submit(
            engine_command(pb.ConverseRequest(client_seq=3, cancel_response=pb.CancelResponse()))
        )
        # The cancel is applied before the reader comes back: the turn's four events and the
        # done are left, the rest taken back.
        await eventually(lambda: session.queue_depths()[1] == 5)
        events = []
        async for event in session.events():
            events.append(event)
            if event.HasField("response_done"):
                break
    finally:
        await engine.stop()
    assert kinds(events) == [
        "input_committed",
        "item_added",
        "item_done",
        "response_created",
        "response_done",
    ]
    done = events[-1].response_done.response
    assert (done.status, done.usage.output_audio_ms) == (pb.RESPONSE_STATUS_CANCELLED, 0.0)
    assert done.output[0].content[0].transcript == ""


async def test_a_new_turn_takes_over_from_a_running_answer(probe: Probe) -> None:
    await probe.append(voice_like(20.0), chunk_ms=200)
    await probe.send(commit_input_audio=pb.CommitInputAudio())
    await probe.until("output_audio_delta")
    await probe.append(voice_like(0.5))
    await probe.send(commit_input_audio=pb.CommitInputAudio())
    first_done = (await probe.until("response_done"))[-1].response_done.response
    second = await probe.until("response_done")
    assert (first_done.status, first_done.status_reason) == (
        pb.RESPONSE_STATUS_CANCELLED,
        "turn_detected",
    )
    assert second[-1].response_done.response.usage.input_audio_ms == pytest.approx(500.0)
    assert len(check_lifecycles(probe.seen)) == 2


async def test_clearing_output_of_a_finished_response_only_confirms(probe: Probe) -> None:
    done = (await run_turn(probe, 0.3))[-1].response_done.response
    await probe.send(clear_output_audio=pb.ClearOutputAudio(response_id=done.id))
    assert (await probe.next()).output_audio_cleared.response_id == done.id
    await probe.send(clear_output_audio=pb.ClearOutputAudio(response_id="resp_unknown"))
    assert error_code(await probe.next()) == "response_not_active"


async def test_truncate_cuts_audio_and_transcript_together(probe: Probe) -> None:
    events = await run_turn(probe, 1.0)
    done = events[-1].response_done.response
    user_id = events[0].input_committed.item_id
    item_id = done.output[0].id
    await probe.send(
        truncate_conversation_item=pb.TruncateConversationItem(item_id=item_id, audio_end_ms=500)
    )
    assert (await probe.next()).item_truncated.audio_end_ms == 500.0
    await probe.send(retrieve_conversation_item=pb.RetrieveConversationItem(item_id=item_id))
    item = (await probe.next()).item_retrieved.item
    assert item.status == pb.ITEM_STATUS_INCOMPLETE
    assert item.content[0].audio_duration_ms == 500.0
    assert item.content[0].transcript == "you said 1.00 "  # the words of the first 500 ms

    for bad in (
        pb.TruncateConversationItem(item_id=user_id, audio_end_ms=10),
        pb.TruncateConversationItem(item_id=item_id, audio_end_ms=900),
        pb.TruncateConversationItem(item_id=item_id, content_index=1, audio_end_ms=10),
    ):
        await probe.send(truncate_conversation_item=bad)
        assert error_code(await probe.next()) == "bad_event"


async def test_created_items_go_where_asked_and_count_as_input(probe: Probe) -> None:
    first = pb.ConversationItem(id="item_first", content=[pb.ContentPart(text="one")])
    await probe.send(create_conversation_item=pb.CreateConversationItem(item=first))
    assert (await probe.until("item_done"))[-1].item_done.previous_item_id == ""
    second = pb.ConversationItem(content=[pb.ContentPart(text="two")])
    await probe.send(
        create_conversation_item=pb.CreateConversationItem(
            item=second, previous_item_id="item_first"
        )
    )
    done = (await probe.until("item_done"))[-1].item_done
    assert (done.previous_item_id, done.item.role) == ("item_first", pb.ITEM_ROLE_USER)
    assert done.item.id.startswith("item_")
    for bad, code in (
        (pb.CreateConversationItem(item=first), "bad_event"),
        (
            pb.CreateConversationItem(item=pb.ConversationItem(), previous_item_id="x"),
            "item_not_found",
        ),
    ):
        await probe.send(create_conversation_item=bad)
        assert error_code(await probe.next()) == code
    await probe.send(create_response=pb.CreateResponse())
    assert transcript(await probe.until("response_done")) == 'you wrote "one two"'


async def test_playback_acks_follow_the_commit_policy(probe: Probe) -> None:
    config = default_config(LoopbackEngine())
    config.playback_commit_policy = pb.PLAYBACK_COMMIT_POLICY_ACK_ONLY
    await probe.send(update_session=pb.UpdateSession(config=config))
    done = (await run_turn(probe, 1.0))[-1].response_done.response
    item_id = done.output[0].id

    await probe.send(ack_playback=pb.AckPlayback(played_ms=600, item_id=item_id))
    partial = (await probe.next()).playback_acknowledged
    assert (partial.response_id, partial.history_committed) == (done.id, False)
    await probe.send(ack_playback=pb.AckPlayback(played_ms=5000))  # more than was sent
    full = (await probe.next()).playback_acknowledged
    assert (full.played_ms, full.committed_ms, full.history_committed) == (1000, 1000, True)
    await probe.send(ack_playback=pb.AckPlayback(played_ms=100))  # played time never goes back
    assert (await probe.next()).playback_acknowledged.played_ms == 1000

    await probe.send(
        ack_playback=pb.AckPlayback(
            played_ms=1000, committed_ms=300, truncate=True, response_id=done.id
        )
    )
    assert (await probe.next()).playback_acknowledged.truncate
    await probe.send(retrieve_conversation_item=pb.RetrieveConversationItem(item_id=item_id))
    assert (await probe.next()).item_retrieved.item.content[0].audio_duration_ms == 300

    await probe.send(
        ack_playback=pb.AckPlayback(played_ms=1, response_id=done.id, item_id="item_x")
    )
    assert error_code(await probe.next()) == "playback_item_mismatch"


async def test_the_engine_refuses_what_is_its_own_to_refuse() -> None:
    engine, probe = await loopback_probe({"pace": "fast", "max_input_s": "0.5"})
    try:
        await probe.send(commit_input_audio=pb.CommitInputAudio())
        assert error_code(await probe.next()) == "input_audio_buffer_empty"
        await probe.append(voice_like(0.4))
        seq = await probe.send(append_input_audio=pb.AppendInputAudio(audio=voice_like(0.2)))
        refused = (await probe.next()).error
        assert (refused.code, refused.client_seq, refused.retryable) == (
            "input_backpressure",
            seq,
            True,
        )
        # The core answers a heartbeat, never the engine: no typed value carries one there.
        with pytest.raises(ValueError, match="heartbeat is not a command for the engine"):
            await probe.send(heartbeat=pb.Heartbeat())
    finally:
        await engine.stop()


@pytest.mark.parametrize("mode", ["turns", "mirror"])
@pytest.mark.parametrize(
    "append",
    [
        pb.AppendInputAudio(audio=b"\0\0", encoding=pb.AUDIO_ENCODING_PCM_F32),
        pb.AppendInputAudio(audio=b"\0"),  # a torn pcm16 sample
    ],
    ids=["f32", "torn"],
)
async def test_input_the_core_should_have_stopped_is_a_bug_the_engine_asserts(
    mode: str, append: pb.AppendInputAudio
) -> None:
    # The core admits an append once (format, whole samples) and the edge makes it a form the
    # engine takes: engines trust that, with a debug assertion rather than a second check.
    engine = LoopbackEngine({"pace": "fast", "mode": mode})
    session = await engine.open_session("s", default_config(engine))
    canonical = pb.AppendInputAudio(audio=b"\0\0")
    await session.submit(
        engine_command(pb.ConverseRequest(client_seq=1, append_input_audio=canonical))
    )
    if mode == "mirror":  # answered at once: response_created, then the chunk
        events = session.events()
        assert (await anext(events)).HasField("response_created")
        assert (await anext(events)).HasField("output_audio_delta")
    await session.idle()  # the worker is open: an append now goes the synchronous way
    with pytest.raises(AssertionError):
        session.submit_now(
            engine_command(pb.ConverseRequest(client_seq=2, append_input_audio=append))
        )
    await session.close()
    await engine.stop()


async def test_a_failing_worker_ends_the_stream_with_engine_error(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(command: BargeIn) -> None:
        raise RuntimeError("planted bug")

    monkeypatch.setitem(probe.session._handlers, BargeIn, broken)  # type: ignore[attr-defined]
    await probe.send(barge_in=pb.BargeIn())
    await probe.stream_end()
    assert isinstance(probe.failure, EngineError)
    assert isinstance(probe.failure.__cause__, RuntimeError)


async def test_a_failing_player_fails_its_response_and_the_session_goes_on(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(answer: object) -> None:
        raise RuntimeError("planted bug")

    monkeypatch.setattr(probe.session, "_play", broken)
    failed = await run_turn(probe, 0.3)
    assert [e.error.code for e in failed if e.HasField("error")] == ["internal_error"]
    done = failed[-1].response_done.response
    assert (done.status, done.status_reason) == (pb.RESPONSE_STATUS_FAILED, "engine_error")
    monkeypatch.undo()
    answered = (await run_turn(probe, 0.3))[-1].response_done.response
    assert answered.status == pb.RESPONSE_STATUS_COMPLETED


async def test_stop_closes_every_session() -> None:
    engine, first = await loopback_probe({"pace": "fast"})
    second = await open_probe(engine, EngineSpec("loopback", lambda: engine), "s2")
    await engine.stop()
    await first.stream_end()
    await second.stream_end()
    assert first.failure is None and second.failure is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pase": "fast"}, "unknown loopback option(s) pase"),
        ({"pace": "slow"}, "pace must be"),
        ({"speed": "0"}, "speed must be"),
        ({"speed": "fast"}, "loopback option speed='fast' is not a valid value"),
        ({"chunk_ms": "5"}, "chunk_ms must be"),
        ({"queue_size": "2"}, "queue_size must be"),
        ({"max_input_s": "nan"}, "max_input_s must be"),
        ({"mode": "echo"}, "mode must be"),
    ],
)
def test_bad_options_are_refused_by_name(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        create_engine("loopback", options)


def test_options_default_to_real_time() -> None:
    assert LoopbackOptions.parse({}) == LoopbackOptions(pace="realtime", speed=1.0, chunk_ms=100)
    assert LoopbackEngine().features.name == "loopback"
    assert not LoopbackEngine().features.supports_server_vad
    assert LoopbackEngine().features.supports_barge_in


async def test_mirror_mode_answers_every_append_with_the_same_audio() -> None:
    engine, probe = await loopback_probe({"pace": "fast", "mode": "mirror"})
    tone = audio.encode(sine(440, 1.0, IN_RATE), pb.AUDIO_ENCODING_PCM16, IN_RATE)
    chunk = IN_RATE * 2 // 50  # 20 ms of pcm16
    for start in range(0, len(tone), chunk):
        await probe.send(append_input_audio=pb.AppendInputAudio(audio=tone[start : start + chunk]))
    created = await probe.next()
    assert created.HasField("response_created")
    deltas = [await probe.next() for _ in range(len(tone) // chunk)]
    assert all(d.HasField("output_audio_delta") for d in deltas)
    assert {d.output_audio_delta.response_id for d in deltas} == {
        created.response_created.response.id
    }
    starts = [d.output_audio_delta.start_ms for d in deltas]
    assert starts == sorted(starts) and starts[0] == 0
    # The same second comes back byte for byte, in the input's own format: nothing resampled.
    assert b"".join(d.output_audio_delta.audio for d in deltas) == tone
    assert {
        (d.output_audio_delta.encoding, d.output_audio_delta.sample_rate_hz) for d in deltas
    } == {(pb.AUDIO_ENCODING_PCM16, IN_RATE)}
    assert [d.output_audio_delta.duration_ms for d in deltas] == [20.0] * len(deltas)
    assert await probe.quiet(0.1) == []  # no turns, no response_done
    await engine.stop()


async def test_mirror_mode_takes_every_pcm16_rate_natively_and_echoes_it_as_it_came() -> None:
    engine, probe = await loopback_probe({"pace": "fast", "mode": "mirror"})
    assert engine.features.native_input_rates_hz == SUPPORTED_RATES_HZ
    assert LoopbackEngine().features.native_input_rates_hz == (IN_RATE,)  # turns: canonical
    chunk = audio.encode(sine(440, 0.02, 48000), pb.AUDIO_ENCODING_PCM16, 48000)
    appended = pb.AppendInputAudio(audio=chunk, sample_rate_hz=48000)
    await probe.send(append_input_audio=appended)
    assert (await probe.next()).HasField("response_created")
    delta = (await probe.next()).output_audio_delta
    assert (delta.audio, delta.sample_rate_hz) == (chunk, 48000)
    await engine.stop()


async def test_an_append_is_applied_at_once_when_nothing_waits_before_it() -> None:
    engine = LoopbackEngine({"pace": "fast", "mode": "mirror"})
    session = await engine.open_session("s", default_config(engine))
    chunk = audio.encode(sine(440, 0.02, IN_RATE), pb.AUDIO_ENCODING_PCM16, IN_RATE)
    append = pb.ConverseRequest(client_seq=1, append_input_audio=pb.AppendInputAudio(audio=chunk))
    # Before the worker opened the session nothing runs ahead of it: the mailbox takes it.
    assert session.submit_now(engine_command(append)) is None
    await session.submit(engine_command(append))
    events = session.events()
    assert (await anext(events)).HasField("response_created")
    assert (await anext(events)).output_audio_delta.audio == chunk
    # Now idle: the next append is applied here and its event returned, not queued.
    made = session.submit_now(engine_command(append))
    assert made is not None and [e.output_audio_delta.audio for e in made] == [chunk]
    assert session.queue_depths() == (0, 0)
    # A refusal of the engine's own comes back the same way, as an error event with the
    # command's client_seq: past the mirror's bound of max_input_s (300 s) in one append.
    huge = pb.AppendInputAudio(audio=bytes(2 * 301 * 48000), sample_rate_hz=48000)
    refused = session.submit_now(
        engine_command(pb.ConverseRequest(client_seq=7, append_input_audio=huge))
    )
    assert refused is not None and (refused[0].error.code, refused[0].error.client_seq) == (
        "input_backpressure",
        7,
    )
    # A command queued before it keeps the order: the append waits behind it.
    await session.submit(
        engine_command(pb.ConverseRequest(client_seq=8, clear_input_audio=pb.ClearInputAudio()))
    )
    assert session.submit_now(engine_command(append)) is None
    await session.close()


async def test_turns_mode_takes_a_plain_append_at_once_and_makes_no_event() -> None:
    engine = LoopbackEngine({"pace": "fast"})
    session = await engine.open_session("s", default_config(engine))
    chunk = audio.encode(sine(440, 0.02, IN_RATE), pb.AUDIO_ENCODING_PCM16, IN_RATE)
    append = pb.ConverseRequest(client_seq=1, append_input_audio=pb.AppendInputAudio(audio=chunk))
    await session.submit(
        engine_command(append)
    )  # through the mailbox: the worker opens the session first
    await session.idle()
    assert session.submit_now(engine_command(append)) == []
    # A commit is not a cheap command: it always goes through the mailbox.
    commit = pb.ConverseRequest(client_seq=2, commit_input_audio=pb.CommitInputAudio())
    assert session.submit_now(engine_command(commit)) is None
    await session.close()
