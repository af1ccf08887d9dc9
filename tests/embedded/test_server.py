"""The embedded engine behind the real gRPC server: a client speaking OpenAI's default format
(pcm16 at 24 kHz) asks a question over a socket and gets a spoken answer back."""

from __future__ import annotations

import io
import time

import grpc
import numpy as np
import soxr

from omni_grpc.client.talk import VAD_TAIL_MS, TalkSettings, talk
from omni_grpc.client.wavio import PcmAudio
from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.app import start_server
from omni_grpc.server.settings import ServerSettings
from omni_grpc.wire import pb
from tests.server.streams import open_stream, read_until

from .conftest import speech
from .driver import retranscribe
from .hearing import heard_as, words


async def test_a_question_over_grpc_gets_a_spoken_answer(engine: EmbeddedEngine) -> None:
    settings = ServerSettings(
        grpc_port=0,
        engine="embedded",
        engine_options={"responder": "echo", "pace": "fast"},
    )
    server = await start_server(settings)
    try:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = duplex_pb2_grpc.DuplexServiceStub(channel)
            call, created = await open_stream(stub)
            assert created.capabilities.engine == "embedded"
            assert created.capabilities.supports_server_vad
            assert created.session.config.turn_detection.type == (pb.TURN_DETECTION_TYPE_SERVER_VAD)
            question = speech.standard_scenes()["question"].signal
            at_24k = soxr.resample(question, 16000, 24000)
            pcm = (np.clip(at_24k, -1, 1) * 32767).astype("<i2").tobytes()
            chunk = 24000 * 2 // 10  # 100 ms
            for seq, start in enumerate(range(0, len(pcm), chunk), start=1):
                await call.write(
                    pb.ConverseRequest(
                        client_seq=seq,
                        append_input_audio=(pb.AppendInputAudio(audio=pcm[start : start + chunk])),
                    )
                )
            events = await read_until(call, "response_done")
            await call.done_writing()
    finally:
        await server.stop()

    heard = next(
        e.input_transcription.transcript for e in events if e.HasField("input_transcription")
    )
    assert heard_as("what is the capital of france", heard), heard
    deltas = [e.output_audio_delta for e in events if e.HasField("output_audio_delta")]
    assert all((d.encoding, d.sample_rate_hz) == (pb.AUDIO_ENCODING_PCM16, 24000) for d in deltas)
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    done = events[-1].response_done.response
    assert done.status == pb.RESPONSE_STATUS_COMPLETED
    answer = "".join(
        e.output_audio_transcript_delta.delta
        for e in events
        if e.HasField("output_audio_transcript_delta")
    )
    assert words(answer) == words(f"you said {heard}")  # the echo of what was heard
    heard_back = retranscribe(engine, b"".join(d.audio for d in deltas))
    assert heard_as(answer, heard_back), heard_back


async def test_talk_with_vad_ends_after_the_answer_to_a_file_ending_in_silence(
    engine: EmbeddedEngine,
) -> None:
    # omni-grpc talk --vad: the answer comes while the file's last 3 s of silence are being
    # sent; the run ends, status 0, once they are, not at its timeout.
    settings = ServerSettings(
        grpc_port=0, engine="embedded", engine_options={"responder": "echo", "pace": "fast"}
    )
    scene = speech.standard_scenes()["question"].pause(3000)
    audio = PcmAudio(scene.pcm16(), 16000)
    server = await start_server(settings)
    out, err = io.StringIO(), io.StringIO()
    try:
        started = time.monotonic()
        status = await talk(
            TalkSettings(target=server.target, audio=audio, vad=True, timeout_s=30.0),
            out=out,
            err=err,
        )
        took_s = time.monotonic() - started
    finally:
        await server.stop()
    assert status == 0, err.getvalue()
    assert "assistant: you said" in out.getvalue().lower()
    sent_s = scene.duration_ms / 1000 + VAD_TAIL_MS / 1000
    assert sent_s <= took_s < sent_s + 15.0, (took_s, sent_s)
