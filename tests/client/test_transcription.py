"""A transcription session over gRPC: the Python client's option, against a real server on a
real port (the loopback engine, whose transcript says what it heard)."""

from __future__ import annotations

import pytest

from omni_grpc.client import (
    ClientOptions,
    DuplexClient,
    OpenRefused,
    ReconnectPolicy,
    Transcription,
)
from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from tests.client.conftest import CONFIG, OPTIONS, collect_until, kinds, tone


async def test_a_transcription_session_writes_turns_down_and_refuses_responses(
    server: RunningServer,
) -> None:
    settings = Transcription(language="nl", prompt="Anouk", logprobs=True)
    async with await DuplexClient.connect(
        server.target, config=CONFIG, options=OPTIONS, transcription=settings
    ) as client:
        assert list(client.capabilities.transcription_models) == ["loopback-words"]
        refused_seq = await client.create_response()
        events = await collect_until(client, "error")
        error = events[-1].error
        assert (error.code, error.client_seq) == ("responses_unsupported", refused_seq)
        await client.append_audio(tone(750))
        await client.commit()
        events = await collect_until(client, "item_done")
        assert kinds(events) == [
            "input_committed",
            "item_added",
            "input_transcription_delta",
            "input_transcription",
            "item_done",
        ]
        transcript = events[3].input_transcription
        assert transcript.transcript == "0.75 seconds of audio in nl, prompted 'Anouk'"
        assert transcript.logprobs[0].token == "0.75"
        # An unknown model in an update is refused, naming it; the session goes on.
        bad = pb.SessionConfig(input_transcription=pb.InputTranscriptionConfig(model="large"))
        seq = await client.update_session(bad)
        error = (await collect_until(client, "error"))[-1].error
        assert (error.code, error.param, error.client_seq) == (
            "unknown_transcription_model",
            "input_transcription.model",
            seq,
        )
        await client.append_audio(tone(250))
        await client.commit()
        events = await collect_until(client, "input_transcription")
        assert events[-1].input_transcription.transcript.startswith("0.25 seconds of audio")
        assert "response_created" not in kinds(events)


async def test_an_unknown_model_refuses_the_open_with_its_code(server: RunningServer) -> None:
    one_shot = ClientOptions(open_retry=ReconnectPolicy(max_attempts=1))
    with pytest.raises(OpenRefused) as refused:
        await DuplexClient.connect(
            server.target, options=one_shot, transcription=Transcription(model="whisper-9")
        )
    assert refused.value.code == "unknown_transcription_model"
