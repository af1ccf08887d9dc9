"""The embedded engine's truncation: SmolLM2's tokenizer counts each turn as its prompt holds it,
against its context less the instructions, examples and the answer's room; what a response
reads is cut by the engine kit's rule, and its usage says how long the prompt was."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.engine.embedded.responder import (
    CONVERSATION_TOKENS,
    EXAMPLES,
    Request,
    SmolResponder,
    TextStream,
)
from omni_grpc.wire import pb

from .driver import open_driver

LIMIT = 80


@pytest.fixture(scope="module")
def smol_engine() -> Iterator[EmbeddedEngine]:
    built = EmbeddedEngine({"responder": "smollm2"})
    built.load()
    yield built
    asyncio.run(built.stop())


def _smol(engine: EmbeddedEngine) -> SmolResponder:
    assert engine.runtime is not None and engine.runtime.smol is not None
    return engine.runtime.smol


def test_a_turn_counts_as_many_tokens_as_it_adds_to_the_prompt(
    smol_engine: EmbeddedEngine,
) -> None:
    smol = _smol(smol_engine)
    turns = [("user", "What is the capital of France?"), ("assistant", "It is Paris.")]
    before = len(smol._prompt("", turns[:1]))
    after = len(smol._prompt("", turns))
    assert smol.count(*turns[1]) == after - before
    # The window: the context less the prompt without turns and the answer's room.
    frame = len(smol._prompt("", []))
    assert smol.window("", False, 160) == smol._model.max_context - 160 - frame
    assert frame > sum(len(text.split()) for _, text in EXAMPLES)  # the examples are in it


async def test_retention_ratio_cuts_what_smollm2_reads_and_keeps_its_start(
    smol_engine: EmbeddedEngine,
) -> None:
    smol = _smol(smol_engine)
    asked: list[Request] = []
    reply = smol.reply

    def spy(request: Request) -> TextStream:
        asked.append(request)
        return reply(request)

    smol.reply = spy  # type: ignore[method-assign]
    truncation = pb.Truncation(
        type=pb.TRUNCATION_TYPE_RETENTION_RATIO,
        retention_ratio=0.5,
        post_instructions_token_limit=LIMIT,
    )
    driver = await open_driver(
        smol_engine,
        output_modalities=[pb.MODALITY_TEXT],
        max_output_tokens=6,
        truncation=truncation,
    )
    usages: dict[str, int] = {}
    try:
        for number in range(8):
            text = f"Question {number}: what is {number} plus one?"
            item = pb.ConversationItem(
                content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text=text)]
            )
            await driver.send(create_conversation_item=pb.CreateConversationItem(item=item))
            await driver.send(create_response=pb.CreateResponse())
            done = await driver.until(
                "response_done", lambda e: e.response_done.response.id not in usages
            )
            response = done.response_done.response
            assert response.status == pb.RESPONSE_STATUS_INCOMPLETE  # six tokens: cut short
            usages[response.id] = response.usage.input_tokens
    finally:
        del smol.reply
        await driver.close()

    read = [sum(smol.count(role, text) for role, text in request.turns) for request in asked]
    firsts = [request.turns[0] for request in asked]
    assert all(tokens <= LIMIT for tokens in read), read
    # Each response's usage is the length of the prompt it was given, conversation included.
    for request, used in zip(asked, usages.values(), strict=True):
        assert used == len(smol._prompt(request.instructions, request.turns, request.tools))
    # A cut happened (the first question is no longer read), and after it the first turn read
    # stayed the same for at least one more turn: the prompt's start was kept.
    assert firsts[-1] != firsts[0]
    cuts = [i for i in range(1, len(firsts)) if firsts[i] != firsts[i - 1]]
    assert cuts and any(firsts[i] == firsts[i + 1] for i in cuts if i + 1 < len(firsts))
    # At a cut, what is left is at most half the limit (the ratio), or the newest turn alone.
    for i in cuts:
        assert read[i] <= LIMIT // 2 or len(asked[i].turns) == 1, (i, read)


def test_without_a_session_limit_auto_reads_at_most_the_conversation_budget(
    smol_engine: EmbeddedEngine,
) -> None:
    smol = _smol(smol_engine)
    window = smol.window("", False, 160)
    assert window is not None and window > CONVERSATION_TOKENS  # the budget is the bound
