"""A conversation adopted from another replica (``restore_history``) and the markers a durable
server asks engines for (``report_applied``), on the loopback through the kit.

The items after the last one a response made wait for an answer, as they did on the lost
replica: a function's output stored before its replica died is answered by the next response,
and a turn already answered is not answered again."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from omni_grpc.core import Limits
from omni_grpc.core.config import resolve_config
from omni_grpc.engine.loopback import LoopbackEngine
from omni_grpc.wire import pb

from .conformance import Probe

USER = pb.ConversationItem(
    id="item_u",
    type=pb.ITEM_TYPE_MESSAGE,
    role=pb.ITEM_ROLE_USER,
    content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text="weather?")],
)
CALL = pb.ConversationItem(
    id="item_c", type=pb.ITEM_TYPE_FUNCTION_CALL, call_id="call_1", name="lookup"
)
OUTPUT = pb.ConversationItem(
    id="item_o", type=pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT, call_id="call_1", output="sunny"
)


@pytest.fixture
async def probe() -> AsyncIterator[Probe]:
    engine = LoopbackEngine({"pace": "fast"})
    requested = pb.SessionConfig(output_modalities=[pb.MODALITY_TEXT])
    config = resolve_config(requested, Limits(), engine.features)
    probe = Probe(await engine.open_session("s1", config), 10.0)
    yield probe
    await probe.close()
    await engine.stop()


async def test_a_function_output_after_the_call_waits_for_an_answer(probe: Probe) -> None:
    await probe.session.restore_history([USER, CALL, OUTPUT])
    await probe.send(create_response=pb.CreateResponse())
    done = (await probe.until("response_done"))[-1].response_done.response
    said = " ".join(part.text for item in done.output for part in item.content)
    assert 'the function returned "sunny"' in said and "weather" not in said, said


async def test_an_answered_turn_is_not_answered_again(probe: Probe) -> None:
    await probe.session.restore_history([USER, CALL])
    await probe.send(create_response=pb.CreateResponse())
    error = (await probe.until("error"))[-1].error
    assert error.code == "response_create_without_input"


async def test_each_numbered_command_is_followed_by_its_marker_when_asked(probe: Probe) -> None:
    probe.session.report_applied = True
    seq = await probe.send(append_input_text=pb.AppendInputText(text="hi"))
    events = [await probe.next() for _ in range(3)]
    assert [e.WhichOneof("event") for e in events] == ["item_added", "item_done", None]
    assert events[-1] == pb.ConverseResponse(applied_client_seq=seq)
