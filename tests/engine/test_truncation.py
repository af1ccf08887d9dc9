"""The engine kit applying the truncation rule, on the loopback engine with ``recall``: what a
response reads and what its usage says, where a retention ratio's reading starts once its
start is deleted, what an out-of-band response reads, and a disabled truncation's typed
failure, after which the session goes on."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from omni_grpc.core import Limits
from omni_grpc.core.config import resolve_config
from omni_grpc.engine.loopback import LoopbackEngine
from omni_grpc.wire import pb

from .conformance import Probe

TEXT = [pb.MODALITY_TEXT]
# A typed turn "tN a b c" is 4 tokens and its answer ('you wrote "tN a b c"') 6; a limit of 20
# halved at each cut.
RATIO = pb.Truncation(
    type=pb.TRUNCATION_TYPE_RETENTION_RATIO, retention_ratio=0.5, post_instructions_token_limit=20
)


async def _probe(truncation: pb.Truncation, context_tokens: int = 32768) -> AsyncIterator[Probe]:
    engine = LoopbackEngine({"pace": "fast", "recall": "1", "context_tokens": str(context_tokens)})
    config = resolve_config(
        pb.SessionConfig(output_modalities=TEXT, truncation=truncation), Limits(), engine.features
    )
    probe = Probe(await engine.open_session("s1", config), timeout_s=10.0)
    yield probe
    await engine.stop()


@pytest.fixture
async def ratio() -> AsyncIterator[Probe]:
    async for probe in _probe(RATIO):
        yield probe


@pytest.fixture
async def disabled() -> AsyncIterator[Probe]:
    async for probe in _probe(pb.Truncation(type=pb.TRUNCATION_TYPE_DISABLED), 20):
        yield probe


async def turn(probe: Probe, number: int, **create: object) -> tuple[str, pb.Response]:
    """A typed turn "t<number> a b c" and the response to it: its item id and the response."""
    item = pb.ConversationItem(
        content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text=f"t{number} a b c")]
    )
    await probe.send(create_conversation_item=pb.CreateConversationItem(item=item))
    item_id = (await probe.until("item_done"))[-1].item_done.item.id
    await probe.send(create_response=pb.CreateResponse(**create))  # type: ignore[arg-type]
    return item_id, (await probe.until("response_done"))[-1].response_done.response


def first_read(response: pb.Response) -> str:
    """The first earlier item the answer lists ("" when it read nothing before its turn)."""
    part = response.output[0].content[0]
    listed = (part.text or part.transcript).split("; earlier: ", 1)[1]
    return "" if listed == "nothing" else listed.split(" | ")[0]


async def test_usage_counts_what_was_read_after_the_cut(ratio: Probe) -> None:
    reads = [(await turn(ratio, n))[1].usage.input_tokens for n in range(5)]
    # 4 and 14 fit; 24 passes 20 and is cut to at most 10 (the turn and the answer before
    # it); then 20 fits from that start; 30 is cut again.
    assert reads == [4, 14, 10, 20, 10]


async def test_deleting_the_kept_start_starts_the_reading_over(ratio: Probe) -> None:
    answers = [(await turn(ratio, n))[1] for n in range(4)]
    # Turn 2 was cut to t1's answer and t2 (10); turn 3 reads from the same start (20).
    assert first_read(answers[2]) == first_read(answers[3]) == 'you wrote "t1 a b c"'
    assert [a.usage.input_tokens for a in answers] == [4, 14, 10, 20]
    await ratio.send(
        delete_conversation_item=pb.DeleteConversationItem(item_id=answers[1].output[0].id)
    )
    await ratio.until("item_deleted")
    # The start is gone: the reading starts from the oldest item left (38 tokens) and is cut
    # to at most 10 again: t3's answer and t4.
    _, after = await turn(ratio, 4)
    assert first_read(after) == 'you wrote "t3 a b c"'
    assert after.usage.input_tokens == 10


async def test_an_out_of_band_response_reads_the_conversation_cut(ratio: Probe) -> None:
    for n in range(4):
        await turn(ratio, n)
    await ratio.send(
        create_response=pb.CreateResponse(
            conversation=pb.RESPONSE_CONVERSATION_NONE, output_modalities=TEXT
        )
    )
    side = (await ratio.until("response_done"))[-1].response_done.response
    # From the kept start (t1's answer) 26 tokens: over 20, cut to t3 and its answer (10).
    assert side.usage.input_tokens == 10


async def test_disabled_over_the_context_fails_alone_and_the_session_goes_on(
    disabled: Probe,
) -> None:
    await turn(disabled, 0)
    _, fits = await turn(disabled, 1)  # 14 of 20
    assert fits.status == pb.RESPONSE_STATUS_COMPLETED
    seen = len(disabled.seen)
    _, failed = await turn(disabled, 2)  # 24 of 20: nothing may be dropped
    assert (failed.status, failed.status_reason) == (
        pb.RESPONSE_STATUS_FAILED,
        "context_length_exceeded",
    )
    assert failed.usage.input_tokens == 0
    assert not any(event.HasField("error") for event in disabled.seen[seen:])
    # The session goes on: with turns 0 and 1 deleted (questions and answers), it fits.
    asked = [event.item_done.item.id for event in disabled.seen if event.HasField("item_done")]
    answered_ids = [
        event.response_done.response.output[0].id
        for event in disabled.seen
        if event.HasField("response_done")
    ]
    for item_id in [*asked[:2], *answered_ids[:2]]:
        await disabled.send(delete_conversation_item=pb.DeleteConversationItem(item_id=item_id))
        await disabled.until("item_deleted", lambda e, i=item_id: e.item_deleted.item_id == i)
    _, answered = await turn(disabled, 3)
    assert answered.status == pb.RESPONSE_STATUS_COMPLETED
    assert answered.usage.input_tokens == 8  # t2, the failed response's empty item, t3
