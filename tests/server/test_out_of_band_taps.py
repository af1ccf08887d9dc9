"""Taps that follow the conversation leave out-of-band responses out of it: the durable item
log (what an adopting replica restores as history) keeps none of their items, and the turn
traces give them no turn (their start does not take over the open turn, their end ends none)."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from omni_grpc.server.durable import ItemLog
from omni_grpc.server.tracing import TurnTraces, server_tracer
from omni_grpc.wire import pb

NONE = pb.RESPONSE_CONVERSATION_NONE


def item(item_id: str, **fields: object) -> pb.ConversationItem:
    return pb.ConversationItem(id=item_id, **fields)  # type: ignore[arg-type]


def created(response_id: str, conversation: int = 0) -> pb.ConverseResponse:
    response = pb.Response(id=response_id, conversation=conversation)  # type: ignore[arg-type]
    return pb.ConverseResponse(response_created=pb.ResponseCreated(response=response))


def done(
    response_id: str, output: list[pb.ConversationItem], conversation: int = 0
) -> pb.ConverseResponse:
    response = pb.Response(id=response_id, output=output, conversation=conversation)  # type: ignore[arg-type]
    return pb.ConverseResponse(response_done=pb.ResponseDone(response=response))


def test_the_item_log_keeps_no_item_of_an_out_of_band_response() -> None:
    log = ItemLog()
    call = item("call_side", type=pb.ITEM_TYPE_FUNCTION_CALL, call_id="c1", name="f")
    events = [
        pb.ConverseResponse(item_done=pb.ItemDone(item=item("user_1"))),
        created("side", NONE),
        created("spoken"),
        pb.ConverseResponse(item_done=pb.ItemDone(item=call, response_id="side")),
        done("side", [item("said_aside"), call], NONE),
        done("spoken", [item("said")]),
    ]
    for event in events:
        log.observe(event.WhichOneof("event"), event)
    kept = pb.Response.FromString(log.serialized()).output
    assert [i.id for i in kept] == ["user_1", "said"]


def test_an_out_of_band_response_is_no_turns_answer_in_the_traces() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = server_tracer(provider)
    assert tracer is not None
    traces = TurnTraces(tracer, "s1")
    text = pb.OutputTextDelta(delta="yes", response_id="side")
    events = [
        pb.ConverseResponse(input_committed=pb.InputCommitted(item_id="user_1")),
        created("side", NONE),
        pb.ConverseResponse(output_text_delta=text),
        done("side", [], NONE),
        created("spoken"),
        pb.ConverseResponse(output_text_delta=pb.OutputTextDelta(delta="hi", response_id="spoken")),
        done("spoken", []),
    ]
    for event in events:
        traces.engine_event(event.WhichOneof("event"), event)
    [turn] = [span for span in exporter.get_finished_spans() if span.name == "omni.turn"]
    assert turn.attributes is not None
    assert turn.attributes["omni.response.id"] == "spoken"
    assert turn.attributes["omni.turn.ended_by"] == "response_done"
    provider.shutdown()
