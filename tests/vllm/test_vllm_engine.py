"""The vllm engine on a real vLLM (the CPU build) with a tiny random Qwen2-Audio model.

What the conformance suite cannot see from outside: that the user's audio really reaches
the model, that answers stream token by token, that a barge-in aborts the vLLM request and
frees it, and that concurrent sessions batched in one engine do not mix.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from omni_grpc import audio
from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import Limits
from omni_grpc.engine.vllm import VllmEngine
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ
from tests.engine.conformance import Probe, check_lifecycles, transcript, voice_like

from .support import ANSWER_TOKENS, VLLM_MARKS, make_engine

pytestmark = VLLM_MARKS


async def open_probe(engine: VllmEngine, name: str, *, text: bool = False) -> Probe:
    requested = pb.SessionConfig(output_modalities=[pb.MODALITY_TEXT] if text else [])
    config = resolve_config(requested, Limits(), engine.features)
    return Probe(await engine.open_session(name, config), 30.0)


def noise(seconds: float, seed: int) -> bytes:
    rate = CANONICAL_INPUT_RATE_HZ
    samples = 0.2 * np.random.default_rng(seed).standard_normal(int(rate * seconds))
    return audio.encode(samples.astype(np.float32), pb.AUDIO_ENCODING_PCM16, rate)


async def answer(probe: Probe, pcm16: bytes) -> pb.Response:
    """Speaks ``pcm16`` as one turn and returns the finished response."""
    await probe.append(pcm16, chunk_ms=100)
    await probe.send(commit_input_audio=pb.CommitInputAudio())
    events = await probe.until("response_done")
    return events[-1].response_done.response


def written(response: pb.Response) -> str:
    part = response.output[0].content[0]
    return part.text or part.transcript


async def test_the_answer_depends_on_the_audio_the_model_heard(engine: VllmEngine) -> None:
    voice, other = voice_like(1.0, f0_hz=140), noise(1.0, seed=7)
    answers = []
    for number, clip in enumerate((voice, voice, other)):
        probe = await open_probe(engine, f"s{number}", text=True)
        try:
            answers.append(await answer(probe, clip))
        finally:
            await probe.close()
    first, again, different = answers
    for response in answers:
        assert response.status == pb.RESPONSE_STATUS_COMPLETED
        assert response.usage.output_tokens == ANSWER_TOKENS + 1  # and the end token
    assert written(first) == written(again)  # greedy: the same audio gives the same tokens
    assert written(first) != written(different)
    # 1 s of audio is 25 audio tokens in the prompt, the same for any 1 s clip.
    assert first.usage.input_tokens == different.usage.input_tokens > 25


async def test_longer_audio_makes_a_longer_prompt(engine: VllmEngine) -> None:
    probe = await open_probe(engine, "lengths", text=True)
    try:
        short = await answer(probe, voice_like(1.0))
    finally:
        await probe.close()
    probe = await open_probe(engine, "lengths-2", text=True)
    try:
        long = await answer(probe, voice_like(3.0))
    finally:
        await probe.close()
    assert long.usage.input_tokens - short.usage.input_tokens == 50  # 25 tokens a second
    assert (short.usage.input_audio_ms, long.usage.input_audio_ms) == (1000.0, 3000.0)


async def test_text_streams_out_token_by_token(engine: VllmEngine) -> None:
    probe = await open_probe(engine, "stream", text=True)
    try:
        await probe.append(voice_like(1.0), chunk_ms=100)
        await probe.send(commit_input_audio=pb.CommitInputAudio())
        events = await probe.until("response_done")
    finally:
        await probe.close()
    deltas = [e.output_text_delta.delta for e in events if e.HasField("output_text_delta")]
    # One delta per sampled token (a token of the byte-level vocabulary may hold no whole
    # character yet, and then its text comes with the next).
    assert ANSWER_TOKENS // 2 <= len(deltas) <= ANSWER_TOKENS
    assert all(deltas)
    done = events[-1].response_done.response
    assert "".join(deltas) == written(done)
    assert 0 < done.latency.first_text_ms < done.latency.total_ms


async def test_a_barge_in_aborts_the_vllm_request_and_frees_it() -> None:
    # Long answers: the end token is held off for 400 tokens, so vLLM is still generating
    # when the first sentence is heard and the user cuts in.
    engine = make_engine(min_tokens="400", max_tokens="400")
    await engine.start()
    probe = await open_probe(engine, "barge")
    try:
        await probe.append(voice_like(1.0), chunk_ms=100)
        await probe.send(commit_input_audio=pb.CommitInputAudio())
        created = (await probe.until("response_created"))[-1].response_created.response
        await probe.until("output_audio_delta")
        request_id = f"barge-{created.id}"
        assert engine.runtime.unfinished_requests() == 1, "vLLM finished before the barge-in"
        await probe.send(barge_in=pb.BargeIn())
        done = (await probe.until("response_done"))[-1].response_done.response
        assert (done.status, done.status_reason) == (pb.RESPONSE_STATUS_CANCELLED, "barge_in")
        assert request_id in engine.runtime.recent_aborts
        assert engine.runtime.unfinished_requests() == 0
        assert done.usage.output_tokens < 400
        # The session goes on: a short written answer, cut by the session's token limit.
        limited = resolve_config(
            pb.SessionConfig(output_modalities=[pb.MODALITY_TEXT], max_output_tokens=8),
            Limits(),
            engine.features,
        )
        await probe.send(update_session=pb.UpdateSession(config=limited))
        after = await answer(probe, voice_like(0.5))
        assert (after.status, after.status_reason) == (
            pb.RESPONSE_STATUS_INCOMPLETE,
            "max_output_tokens",
        )
        assert after.usage.output_tokens == 8
    finally:
        await probe.close()
        await engine.stop()
    assert engine.runtime.unfinished_requests() == 0


async def test_closing_a_session_mid_answer_aborts_its_request() -> None:
    engine = make_engine(min_tokens="400", max_tokens="400")
    await engine.start()
    probe = await open_probe(engine, "closing")
    await probe.append(voice_like(1.0), chunk_ms=100)
    await probe.send(commit_input_audio=pb.CommitInputAudio())
    created = (await probe.until("response_created"))[-1].response_created.response
    await probe.until("output_audio_delta")
    await probe.close()
    assert f"closing-{created.id}" in engine.runtime.recent_aborts
    assert engine.runtime.unfinished_requests() == 0
    await engine.stop()


async def test_concurrent_sessions_get_their_own_answers(engine: VllmEngine) -> None:
    clips = [voice_like(1.0, f0_hz=120), noise(1.5, seed=3), voice_like(0.5, f0_hz=260)]
    alone = []
    for number, clip in enumerate(clips):
        probe = await open_probe(engine, f"alone{number}", text=True)
        try:
            alone.append(written(await answer(probe, clip)))
        finally:
            await probe.close()
    assert len(set(alone)) == 3
    probes = [await open_probe(engine, f"together{n}", text=True) for n in range(3)]
    try:
        together = await asyncio.gather(*(answer(p, c) for p, c in zip(probes, clips, strict=True)))
    finally:
        for probe in probes:
            await probe.close()
    assert [written(response) for response in together] == alone
    for probe, response, clip in zip(probes, together, clips, strict=True):
        assert set(check_lifecycles(probe.seen)) == {response.id}
        assert response.usage.input_audio_ms == pytest.approx(len(clip) / 32)


async def test_a_second_turn_hears_the_first_and_the_answer(engine: VllmEngine) -> None:
    probe = await open_probe(engine, "history", text=True)
    try:
        first = await answer(probe, voice_like(1.0))
        second = await answer(probe, voice_like(1.0, f0_hz=200))
        await probe.send(append_input_text=pb.AppendInputText(text="and one more thing"))
        await probe.send(create_response=pb.CreateResponse())
        third = (await probe.until("response_done"))[-1].response_done.response
    finally:
        await probe.close()
    # Turn two's prompt holds turn one's audio and answer, then its own audio (25 tokens).
    assert second.usage.input_tokens > first.usage.input_tokens + 25 + 5
    # Turn three's holds all of that, turn two's answer, and the words.
    assert third.usage.input_tokens > second.usage.input_tokens + 5
    assert third.status == pb.RESPONSE_STATUS_COMPLETED


async def test_a_prompt_the_model_cannot_take_fails_the_response_only(engine: VllmEngine) -> None:
    probe = await open_probe(engine, "too-long", text=True)
    try:
        words = " ".join(["hello world"] * 2000)  # far past max_model_len (2048 tokens)
        item = pb.ConversationItem(
            role=pb.ITEM_ROLE_USER,
            content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text=words)],
        )
        await probe.send(create_conversation_item=pb.CreateConversationItem(item=item))
        added = (await probe.until("item_done"))[-1].item_done.item
        await probe.send(create_response=pb.CreateResponse())
        events = await probe.until("response_done")
        (error,) = [e.error for e in events if e.HasField("error")]
        # A code that says which part failed, and a sentence: no exception text on the wire.
        assert (error.code, error.type) == ("model_request_failed", pb.ERROR_TYPE_SERVER)
        assert error.message == "vLLM could not serve the response's request"
        failed = events[-1].response_done.response
        assert (failed.status, failed.status_reason) == (pb.RESPONSE_STATUS_FAILED, "engine_error")
        # Without the long item the conversation goes on.
        await probe.send(delete_conversation_item=pb.DeleteConversationItem(item_id=added.id))
        await probe.until("item_deleted")
        assert (await answer(probe, voice_like(0.5))).status == pb.RESPONSE_STATUS_COMPLETED
    finally:
        await probe.close()
    assert engine.runtime.unfinished_requests() == 0


async def test_spoken_answers_carry_their_words(engine: VllmEngine) -> None:
    probe = await open_probe(engine, "spoken")
    try:
        await probe.append(voice_like(1.0), chunk_ms=100)
        await probe.send(commit_input_audio=pb.CommitInputAudio())
        events = await probe.until("response_done")
    finally:
        await probe.close()
    (reply,) = check_lifecycles(events).values()
    done = reply[-1].response_done.response
    assert done.status == pb.RESPONSE_STATUS_COMPLETED
    assert done.usage.output_audio_ms > 500
    assert transcript(reply) == done.output[0].content[0].transcript != ""
