"""The core's rules for a response's own options: out of band, its own input, its cap and voice.

One check (``check_response_options``), with a typed refusal naming the param for each bound;
an engine without out-of-band responses refuses them typed; the command the engine gets carries
every option, read once; and an out-of-band response is never the session's running response: it
moves no turn state, counts in no interruption epoch, and yet its late output is stale as any.
"""

from __future__ import annotations

from typing import Any

import pytest

from omni_grpc.core import CommandError, EngineFeatures, Limits
from omni_grpc.core.commands import CreateResponse, InputEntry, engine_command
from omni_grpc.core.responses import TurnState
from omni_grpc.core.validation import check_command
from omni_grpc.wire import pb
from omni_grpc.wire.bounds import MAX_RESPONSE_INPUT_ENTRIES

from .helpers import cmd, decode, delta, done, open_session, requests

LIMITS = Limits()
OOB = EngineFeatures(
    name="side-engine",
    default_model="test-model",
    supports_out_of_band_responses=True,
    out_of_band_beside_response=True,
)
NO_OOB = EngineFeatures(name="one-response-engine", default_model="test-model")
NONE = pb.RESPONSE_CONVERSATION_NONE


def create(**fields: Any) -> pb.ConverseRequest:
    return cmd(1, "ev-r", create_response=pb.CreateResponse(**fields))


def text_item(value: str, **fields: Any) -> pb.ResponseInputEntry:
    part = pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text=value)
    return pb.ResponseInputEntry(item=pb.ConversationItem(content=[part], **fields))


def entries(*made: pb.ResponseInputEntry) -> pb.ResponseInput:
    return pb.ResponseInput(entries=list(made))


def reference(item_id: str) -> pb.ResponseInputEntry:
    return pb.ResponseInputEntry(item_reference=item_id)


def refusal(request_: pb.ConverseRequest, engine: EngineFeatures = OOB) -> tuple[str, str]:
    with pytest.raises(CommandError) as refused:
        check_command(request_, "create_response", LIMITS, engine)
    return refused.value.code, refused.value.param


BAD: list[tuple[pb.ConverseRequest, EngineFeatures, str, str]] = [
    (create(conversation=NONE), NO_OOB, "out_of_band_unsupported", "conversation"),
    (create(input=entries()), NO_OOB, "out_of_band_unsupported", "input"),
    (create(conversation=7), OOB, "bad_event", "conversation"),
    (create(max_output_tokens=0), OOB, "bad_event", "max_output_tokens"),
    (create(max_output_tokens=4097), OOB, "bad_event", "max_output_tokens"),
    (create(voice="v" * 65), OOB, "bad_event", "voice"),
    (
        create(input=entries(*[reference("i")] * (MAX_RESPONSE_INPUT_ENTRIES + 1))),
        OOB,
        "bad_event",
        "input",
    ),
    (create(input=entries(reference("i"), reference(""))), OOB, "missing_item_id", "input.1.id"),
    (create(input=entries(pb.ResponseInputEntry())), OOB, "bad_event", "input.0"),
    (
        create(
            input=entries(
                text_item("hi"),
                pb.ResponseInputEntry(
                    item=pb.ConversationItem(
                        content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_AUDIO, audio=b"\0\0")]
                    )
                ),
            )
        ),
        OOB,
        "unsupported_content",
        "input.1.content.0.audio",
    ),
    (
        create(
            input=entries(
                pb.ResponseInputEntry(
                    item=pb.ConversationItem(type=pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT, output="{}")
                )
            )
        ),
        OOB,
        "bad_event",
        "input.0.call_id",
    ),
    (
        create(input=entries(text_item("x" * LIMITS.max_text_chars), text_item("y"))),
        OOB,
        "bad_event",
        "input",
    ),
]


@pytest.mark.parametrize(("request_", "engine", "code", "param"), BAD)
def test_each_bound_is_a_typed_refusal_naming_its_param(
    request_: pb.ConverseRequest, engine: EngineFeatures, code: str, param: str
) -> None:
    assert refusal(request_, engine) == (code, param)


@pytest.mark.parametrize(
    "request_",
    [
        create(conversation=NONE),
        create(conversation=pb.RESPONSE_CONVERSATION_AUTO, input=entries()),
        create(
            conversation=NONE,
            input=entries(*[reference("i")] * MAX_RESPONSE_INPUT_ENTRIES),
            max_output_tokens=4096,
            voice="v" * 64,
        ),
        create(input=entries(text_item("x" * LIMITS.max_text_chars))),
    ],
)
def test_options_within_their_bounds_pass(request_: pb.ConverseRequest) -> None:
    check_command(request_, "create_response", LIMITS, OOB)


def test_a_response_of_the_conversation_needs_nothing_of_the_engine() -> None:
    # What every engine serves: the per-response cap and voice are the engine's to honour.
    check_command(create(max_output_tokens=16, voice="alloy"), "create_response", LIMITS, NO_OOB)


def test_the_engine_gets_every_option_read_once() -> None:
    request_ = create(
        conversation=NONE,
        input=entries(reference("item_1"), text_item("is it a question?", id="mine")),
        max_output_tokens=12,
        voice="cedar",
        metadata={"k": "v"},
        output_modalities=[pb.MODALITY_TEXT],
    )
    command = engine_command(request_)
    assert isinstance(command, CreateResponse)
    assert command.out_of_band and command.max_output_tokens == 12 and command.voice == "cedar"
    assert command.metadata == {"k": "v"} and command.output_modalities == (pb.MODALITY_TEXT,)
    assert command.input is not None
    first, second = command.input
    assert first == InputEntry(reference="item_1")
    assert second.reference == "" and second.item is not None and second.item.id == "mine"


def test_an_empty_input_is_no_context_and_no_input_is_the_conversation() -> None:
    empty = engine_command(create(input=entries()))
    assert isinstance(empty, CreateResponse) and empty.input == ()
    plain = engine_command(create())
    assert isinstance(plain, CreateResponse)
    assert (plain.input, plain.out_of_band, plain.max_output_tokens, plain.voice) == (
        None,
        False,
        None,
        None,
    )


def test_the_session_refuses_out_of_band_where_the_engine_has_none_and_goes_on() -> None:
    s = open_session(engine=NO_OOB).session
    effects = s.receive(1, create(conversation=NONE), now=0.0)
    assert requests(effects) == []
    [event] = decode(effects)
    assert (event.error.code, event.error.param, event.error.event_id) == (
        "out_of_band_unsupported",
        "conversation",
        "ev-r",
    )
    later = s.receive(1, cmd(2, create_response=pb.CreateResponse()), now=0.0)
    assert [kind for kind, _ in requests(later)] == ["create_response"]


def out_of_band_created(response_id: str) -> pb.ConverseResponse:
    response = pb.Response(id=response_id, status=pb.RESPONSE_STATUS_IN_PROGRESS, conversation=NONE)
    return pb.ConverseResponse(response_created=pb.ResponseCreated(response=response))


def out_of_band_done(
    response_id: str, status: pb.ResponseStatus.ValueType = pb.RESPONSE_STATUS_COMPLETED
) -> pb.ConverseResponse:
    response = pb.Response(id=response_id, status=status, conversation=NONE)
    return pb.ConverseResponse(response_done=pb.ResponseDone(response=response))


def test_an_out_of_band_response_is_never_the_running_response() -> None:
    s = open_session(engine=OOB).session
    s.publish(out_of_band_created("side"), now=0.0)
    assert (s.responses.active_response_id, s.responses.turn) == ("", TurnState.IDLE)
    s.publish(pb.ConverseResponse(response_created=_spoken("spoken")), now=0.0)
    assert s.responses.active_response_id == "spoken"
    # Its end moves nothing of the running response's, nor counts as an interruption.
    s.publish(out_of_band_done("side", pb.RESPONSE_STATUS_CANCELLED), now=0.0)
    assert (s.responses.active_response_id, s.responses.turn, s.responses.epoch) == (
        "spoken",
        TurnState.ASSISTANT_RESPONDING,
        0,
    )
    s.publish(done("spoken"), now=0.0)
    assert (s.responses.active_response_id, s.responses.turn) == ("", TurnState.IDLE)


def test_late_output_of_an_out_of_band_response_is_stale() -> None:
    s = open_session(engine=OOB).session
    s.publish(out_of_band_created("side"), now=0.0)
    s.publish(delta("side", "live"), now=0.0)
    s.publish(out_of_band_done("side"), now=0.0)
    head = s.journal.head
    s.publish(delta("side", "late"), now=0.0)
    assert (s.responses.dropped_stale_events, s.journal.head) == (1, head)


def _spoken(response_id: str) -> pb.ResponseCreated:
    return pb.ResponseCreated(
        response=pb.Response(id=response_id, status=pb.RESPONSE_STATUS_IN_PROGRESS)
    )
