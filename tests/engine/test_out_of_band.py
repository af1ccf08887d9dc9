"""Out-of-band responses and a response's own input in the engine kit, on the loopback engine.

An out-of-band response runs beside the running one as a task of its own: it takes no pending
input, its items join no history, a barge-in, a new turn or a cancel without an id leave it be,
and a cancel that names it ends it. A response's own input is what it reads instead of the
conversation, a reference resolving to the conversation's own item.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from omni_grpc.engine.loopback import LoopbackEngine
from omni_grpc.engine.loopback.session import LoopbackSession
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import MAX_OUT_OF_BAND_RESPONSES

from .conformance import EngineSpec, Probe, check_lifecycles, open_probe, run_turn, voice_like

NONE = pb.RESPONSE_CONVERSATION_NONE
TEXT = [pb.MODALITY_TEXT]


async def probe_of(options: dict[str, str]) -> AsyncIterator[Probe]:
    engine = LoopbackEngine(options)
    opened = await open_probe(engine, EngineSpec("loopback", lambda: engine))
    yield opened
    await engine.stop()


@pytest.fixture
async def fast() -> AsyncIterator[Probe]:
    async for opened in probe_of({"pace": "fast"}):
        yield opened


@pytest.fixture
async def realtime() -> AsyncIterator[Probe]:
    """Real time: an out-of-band answer to a long text takes seconds, so it is still running
    while the test does what it does beside it."""
    async for opened in probe_of({"pace": "realtime"}):
        yield opened


def typed(text: str) -> pb.ConversationItem:
    return pb.ConversationItem(content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text=text)])


def given(*entries: pb.ConversationItem | str) -> pb.ResponseInput:
    return pb.ResponseInput(
        entries=[
            pb.ResponseInputEntry(item_reference=entry)
            if isinstance(entry, str)
            else pb.ResponseInputEntry(item=entry)
            for entry in entries
        ]
    )


def side(**fields: object) -> pb.CreateResponse:
    return pb.CreateResponse(conversation=NONE, output_modalities=TEXT, **fields)  # type: ignore[arg-type]


def text_of(done: pb.ConverseResponse) -> str:
    part = done.response_done.response.output[0].content[0]
    return part.text or part.transcript


async def add_item(probe: Probe, text: str) -> str:
    await probe.send(create_conversation_item=pb.CreateConversationItem(item=typed(text)))
    item_id: str = (await probe.until("item_done"))[-1].item_done.item.id
    return item_id


async def test_it_reads_the_conversation_takes_none_of_it_and_adds_nothing(fast: Probe) -> None:
    await add_item(fast, "one")
    await fast.send(create_response=side(metadata={"k": "v"}))
    events = await fast.until("response_done")
    created = next(e for e in events if e.HasField("response_created")).response_created
    done = events[-1].response_done.response
    assert created.response.conversation == NONE and done.conversation == NONE
    assert dict(created.response.metadata) == dict(done.metadata) == {"k": "v"}
    assert text_of(events[-1]) == 'you wrote "one"'
    assert not any(e.HasField("item_added") or e.HasField("item_done") for e in events)
    # Its item is in no history; the input it read still waits for the conversation's answer.
    await fast.send(
        retrieve_conversation_item=pb.RetrieveConversationItem(item_id=done.output[0].id)
    )
    assert (await fast.next()).error.code == "item_not_found"
    await fast.send(create_response=pb.CreateResponse(output_modalities=TEXT))
    assert text_of((await fast.until("response_done"))[-1]) == 'you wrote "one"'


async def test_its_own_input_is_read_instead_a_reference_as_the_item_it_names(fast: Probe) -> None:
    first = await add_item(fast, "one")
    await add_item(fast, "two")
    await fast.send(create_response=side(input=given(first, typed("three"))))
    assert text_of((await fast.until("response_done"))[-1]) == 'you wrote "one three"'
    await fast.send(create_response=side(input=given()))
    assert text_of((await fast.until("response_done"))[-1]) == "you sent an empty item"


async def test_a_reference_to_no_item_is_refused_naming_the_entry(fast: Probe) -> None:
    await fast.send(create_response=side(input=given(typed("fine"), "item_nowhere")))
    error = (await fast.next()).error
    assert (error.code, error.param) == ("item_not_found", "input.1.id")
    await fast.send(create_response=side(input=given(typed("fine"))))
    assert text_of((await fast.until("response_done"))[-1]) == 'you wrote "fine"'


async def test_an_in_band_response_with_its_own_input_joins_history_and_leaves_input_waiting(
    fast: Probe,
) -> None:
    await add_item(fast, "one")
    await fast.send(
        create_response=pb.CreateResponse(output_modalities=TEXT, input=given(typed("two")))
    )
    events = await fast.until("response_done")
    assert text_of(events[-1]) == 'you wrote "two"'
    own = events[-1].response_done.response
    assert own.conversation == pb.RESPONSE_CONVERSATION_UNSPECIFIED
    await fast.send(
        retrieve_conversation_item=pb.RetrieveConversationItem(item_id=own.output[0].id)
    )
    assert (await fast.next()).item_retrieved.item.id == own.output[0].id
    await fast.send(create_response=pb.CreateResponse(output_modalities=TEXT))
    assert text_of((await fast.until("response_done"))[-1]) == 'you wrote "one"'


async def test_its_own_cap_cuts_its_words(fast: Probe) -> None:
    await fast.send(create_response=side(input=given(typed("one two three")), max_output_tokens=3))
    done = (await fast.until("response_done"))[-1]
    response = done.response_done.response
    assert (response.status, response.status_reason) == (
        pb.RESPONSE_STATUS_INCOMPLETE,
        "max_output_tokens",
    )
    assert text_of(done) == 'you wrote "one'
    assert response.max_output_tokens == 3 and response.voice == ""


async def started(probe: Probe, create: pb.CreateResponse) -> str:
    await probe.send(create_response=create)
    events = await probe.until("response_created")
    response_id: str = events[-1].response_created.response.id
    return response_id


async def test_a_barge_in_a_new_turn_and_an_unnamed_cancel_leave_it_running(
    realtime: Probe,
) -> None:
    long_read = given(typed("a long question " * 8))  # a tone of 5 s, the words on its schedule
    oob = await started(realtime, side(input=long_read))
    await realtime.append(voice_like(3.0), chunk_ms=500)
    await realtime.send(commit_input_audio=pb.CommitInputAudio())
    await realtime.until("response_created", lambda e: e.response_created.response.id != oob)
    await realtime.send(barge_in=pb.BargeIn())
    ended = (await realtime.until("response_done"))[-1].response_done.response
    assert ended.id != oob and ended.status_reason == "barge_in"
    await realtime.send(cancel_response=pb.CancelResponse())
    assert (await realtime.until("error"))[-1].error.code == "response_not_active"
    # Named, it ends, cancelled by the client.
    await realtime.send(cancel_response=pb.CancelResponse(response_id=oob))
    done = (await realtime.until("response_done"))[-1].response_done.response
    assert (done.id, done.status, done.status_reason) == (
        oob,
        pb.RESPONSE_STATUS_CANCELLED,
        "client_cancelled",
    )
    check_lifecycles(realtime.seen)


async def test_at_most_a_few_run_at_once(realtime: Probe) -> None:
    long_read = given(typed("a long question " * 8))
    running = [
        await started(realtime, side(input=long_read)) for _ in range(MAX_OUT_OF_BAND_RESPONSES)
    ]
    await realtime.send(create_response=side(input=long_read))
    assert (await realtime.until("error"))[-1].error.code == "response_already_active"
    for response_id in running:
        await realtime.send(clear_output_audio=pb.ClearOutputAudio(response_id=response_id))
        done = (await realtime.until("response_done"))[-1].response_done.response
        assert (done.id, done.status_reason) == (response_id, "output_audio_cleared")
    # Room again.
    await started(realtime, side(input=given()))


async def test_an_ack_that_names_no_response_is_about_the_conversations(fast: Probe) -> None:
    spoken = (await run_turn(fast, 0.5))[-1].response_done.response
    await add_item(fast, "one")
    await fast.send(create_response=side())
    await fast.until("response_done")
    await fast.send(ack_playback=pb.AckPlayback(played_ms=100))
    assert (await fast.next()).playback_acknowledged.response_id == spoken.id


@pytest.fixture
async def one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Probe]:
    """An engine of the kit whose model cannot run two requests (``out_of_band_beside``
    False), at four times real time."""
    monkeypatch.setattr(LoopbackSession, "out_of_band_beside", False)
    async for opened in probe_of({"pace": "realtime", "speed": "4"}):
        yield opened


async def test_where_the_model_answers_one_at_a_time_it_starts_after_the_reply(
    one_at_a_time: Probe,
) -> None:
    probe = one_at_a_time
    await probe.append(voice_like(1.0), chunk_ms=500)
    await probe.send(commit_input_audio=pb.CommitInputAudio())
    spoken = (await probe.until("response_created"))[-1].response_created.response.id
    await probe.send(create_response=side(input=given(typed("aside"))))
    events = await probe.until("response_done", lambda e: e.response_done.response.id != spoken)
    ends = [
        ("created", e.response_created.response.id)
        if e.HasField("response_created")
        else ("done", e.response_done.response.id)
        for e in events
        if e.HasField("response_created") or e.HasField("response_done")
    ]
    # It waited, unannounced, for the reply to end, then ran.
    assert [kind for kind, _ in ends] == ["done", "created", "done"]
    assert ends[0][1] == spoken and ends[1][1] == ends[2][1] != spoken
    assert text_of(events[-1]) == 'you wrote "aside"'
