"""The talk command's engine room, in process: pacing, turn timing, reply audio, failures."""

from __future__ import annotations

import io
import time
from pathlib import Path

from omni_grpc.client.talk import TalkRun, TalkSettings, TurnTiming, talk
from omni_grpc.client.wavio import PcmAudio, read_audio
from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from tests.client.conftest import RATE_HZ, tone
from tests.client.proxy import ChaosProxy

HALF_SECOND = PcmAudio(tone(500), RATE_HZ)


async def test_talk_paces_in_real_time_and_saves_the_reply(
    server: RunningServer, tmp_path: Path
) -> None:
    out, err = io.StringIO(), io.StringIO()
    reply = tmp_path / "reply.wav"
    started = time.monotonic()
    status = await talk(
        TalkSettings(target=server.target, audio=HALF_SECOND, out_path=str(reply)),
        out=out,
        err=err,
    )
    assert status == 0, err.getvalue()
    assert time.monotonic() - started >= 0.45  # 500 ms of audio took its own time to send
    assert "assistant: you said 0.50 seconds of audio" in out.getvalue()
    assert "turn 1: ttft " in out.getvalue() and "| 0.50 s audio" in out.getvalue()
    assert read_audio(reply).duration_ms == 500.0
    assert "sent 0.5 / 0.5 s" in err.getvalue()


async def test_talk_survives_a_cut_and_says_so(server: RunningServer, proxy: ChaosProxy) -> None:
    out, err = io.StringIO(), io.StringIO()
    proxy.cut_after_bytes(8000)
    settings = TalkSettings(target=proxy.target, audio=HALF_SECOND, fast=True, chunk_ms=20)
    assert await talk(settings, out=out, err=err) == 0, err.getvalue()
    assert "assistant: you said 0.50 seconds of audio" in out.getvalue()
    assert "reconnects: 1" in err.getvalue()


async def test_talk_reports_a_refused_session(server: RunningServer) -> None:
    out, err = io.StringIO(), io.StringIO()
    settings = TalkSettings(target=server.target, audio=HALF_SECOND, fast=True, vad=True)
    assert await talk(settings, out=out, err=err) == 1
    assert "unsupported_turn_detection" in err.getvalue()


def _event(**fields: object) -> pb.ConverseResponse:
    return pb.ConverseResponse(**fields)  # type: ignore[arg-type]


def test_vad_turns_are_timed_from_speech_stopped() -> None:
    out = io.StringIO()
    talk_state = TalkRun(out, verbose=False, vad=True)
    talk_state.end_input(time.monotonic())
    assert not talk_state.finished.is_set()  # with VAD the server ends the turn
    talk_state.on_event(_event(seq=1, speech_stopped=pb.SpeechStopped(audio_end_ms=900)))
    talk_state.on_event(_event(seq=2, response_created=pb.ResponseCreated()))
    talk_state.on_event(_event(seq=3, output_text_delta=pb.OutputTextDelta(delta="hello")))
    talk_state.on_event(
        _event(
            seq=4,
            output_audio_delta=pb.OutputAudioDelta(
                audio=b"\0\0" * 2400,
                encoding=pb.AUDIO_ENCODING_PCM16,
                sample_rate_hz=24000,
                duration_ms=100,
            ),
        )
    )
    talk_state.on_event(_event(seq=5, response_done=pb.ResponseDone()))
    assert talk_state.finished.is_set() and talk_state.failure is None
    (turn,) = talk_state.turns
    assert turn.transcript == "hello" and turn.audio_ms == 100
    assert turn.first_text is not None and turn.first_text >= turn.end_of_input
    assert "assistant: hello" in out.getvalue() and "turn 1: ttft" in out.getvalue()
    assert len(talk_state.reply) == 4800


def test_a_vad_run_answered_before_its_silence_is_sent_ends_with_the_input() -> None:
    # A file that ends in seconds of silence: the server ends the turn and answers it while
    # the silence is still being sent; the run is over once it is sent, not at the timeout.
    talk_state = TalkRun(io.StringIO(), verbose=False, vad=True)
    talk_state.on_event(_event(seq=1, speech_stopped=pb.SpeechStopped(audio_end_ms=900)))
    talk_state.on_event(_event(seq=2, response_created=pb.ResponseCreated()))
    talk_state.on_event(_event(seq=3, response_done=pb.ResponseDone()))
    assert not talk_state.finished.is_set()  # more speech may follow in the file
    talk_state.end_input(time.monotonic())
    assert talk_state.finished.is_set() and talk_state.failure is None
    assert len(talk_state.turns) == 1


def test_a_vad_run_waits_for_a_turn_still_being_answered() -> None:
    talk_state = TalkRun(io.StringIO(), verbose=False, vad=True)
    talk_state.on_event(_event(seq=1, speech_stopped=pb.SpeechStopped(audio_end_ms=900)))
    talk_state.on_event(_event(seq=2, response_created=pb.ResponseCreated()))
    talk_state.end_input(time.monotonic())
    assert not talk_state.finished.is_set()
    talk_state.on_event(_event(seq=3, response_done=pb.ResponseDone()))
    assert talk_state.finished.is_set()


def test_an_rtf_above_1_says_what_it_is() -> None:
    slow = TurnTiming(end_of_input=10.0, first_audio=10.5, last_audio=13.0, audio_ms=2000.0)
    assert "rtf 1.500 (end of input to last audio over the audio's length" in slow.summary()
    fast = TurnTiming(end_of_input=10.0, first_audio=10.2, last_audio=11.0, audio_ms=2000.0)
    assert "rtf 0.500 |" in fast.summary()


def test_an_error_after_the_input_fails_the_run() -> None:
    talk_state = TalkRun(io.StringIO(), verbose=True, vad=False)
    talk_state.end_input(time.monotonic())
    talk_state.on_event(
        _event(error=pb.ErrorReport(code="input_audio_buffer_empty", message="empty"))
    )
    assert talk_state.finished.is_set()
    assert talk_state.failure == "input_audio_buffer_empty: empty"


def test_audio_that_is_not_pcm16_fails_the_run() -> None:
    talk_state = TalkRun(io.StringIO(), verbose=False, vad=False)
    talk_state.end_input(time.monotonic())
    talk_state.on_event(_event(response_created=pb.ResponseCreated()))
    talk_state.on_event(
        _event(
            output_audio_delta=pb.OutputAudioDelta(
                audio=b"\0" * 10, encoding=pb.AUDIO_ENCODING_G711_ULAW
            )
        )
    )
    assert talk_state.failure == "the server sent audio that is not pcm16"
