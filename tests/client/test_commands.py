"""Every command helper builds the request the server expects: each gets its own answer."""

from __future__ import annotations

from omni_grpc.client import DuplexClient
from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from tests.client.conftest import CONFIG, OPTIONS, collect_until, kinds, tone


async def test_each_command_gets_its_answer(server: RunningServer) -> None:
    client = await DuplexClient.connect(server.target, config=CONFIG, options=OPTIONS)

    async def answer(kind: str) -> pb.ConverseResponse:
        return (await collect_until(client, kind))[-1]

    await client.update_session(pb.SessionConfig(instructions="be brief"))
    assert (await answer("session_updated")).session_updated.session.config.instructions == (
        "be brief"
    )
    assert client.session.config.instructions == "be brief"
    await client.append_text("hello")
    text = (await answer("item_done")).item_done.item
    assert text.role == pb.ITEM_ROLE_USER and text.content[0].text == "hello"
    await client.create_item(
        pb.ConversationItem(
            role=pb.ITEM_ROLE_USER,
            content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text="hi")],
        )
    )
    created = (await answer("item_done")).item_done.item
    await client.append_audio(
        tone(100), encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=16000, audio_end_ms=100.0
    )
    await client.clear_input()
    await answer("input_cleared")
    await client.append_audio(tone(300))
    await client.commit(create_response=True)
    turn = await collect_until(client, "response_done")
    assert turn[0].input_committed.previous_item_id == created.id
    started = next(e for e in turn if e.WhichOneof("event") == "response_created")
    item_id, response_id = started.response_created.item_id, started.response_created.response.id

    await client.retrieve_item(item_id)
    assert (await answer("item_retrieved")).item_retrieved.item.id == item_id
    await client.ack_playback(100.0, response_id=response_id)
    played = (await answer("playback_acknowledged")).playback_acknowledged
    assert (played.played_ms, played.committed_ms, played.item_id) == (100.0, 100.0, item_id)
    await client.truncate_item(item_id, audio_end_ms=50.0)
    assert (await answer("item_truncated")).item_truncated.audio_end_ms == 50.0
    await client.delete_item(item_id)
    assert (await answer("item_deleted")).item_deleted.item_id == item_id
    await client.cancel_input()
    await answer("input_cleared")
    # With nothing running, the engine refuses these by the command's own number.
    for send in (client.cancel_response, client.clear_output, client.barge_in):
        seq = await send()
        error = (await answer("error")).error
        assert (error.code, error.client_seq) == ("response_not_active", seq)
    await client.heartbeat()
    assert kinds(await collect_until(client, "heartbeat_ack")) == ["heartbeat_ack"]
    await client.close()


async def test_create_response_asks_for_an_out_of_band_answer_of_its_own_input(
    server: RunningServer,
) -> None:
    client = await DuplexClient.connect(server.target, config=CONFIG, options=OPTIONS)
    await client.append_text("cancel my order")
    said = (await collect_until(client, "item_done"))[-1].item_done.item
    question = pb.ConversationItem(
        content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text="is it a cancellation?")]
    )
    await client.create_response(
        output_modalities=[pb.MODALITY_TEXT],
        metadata={"purpose": "classify"},
        out_of_band=True,
        input=[said.id, question],
        max_output_tokens=4,
        voice="cedar",
    )
    done = (await collect_until(client, "response_done"))[-1].response_done.response
    assert done.conversation == pb.RESPONSE_CONVERSATION_NONE
    assert dict(done.metadata) == {"purpose": "classify"}
    assert (done.max_output_tokens, done.voice) == (4, "cedar")
    assert (done.status_reason, done.output[0].content[0].text) == (
        "max_output_tokens",
        'you wrote "cancel my',
    )
    # The typed item still waits for the conversation's own answer.
    await client.create_response(output_modalities=[pb.MODALITY_TEXT])
    answer = (await collect_until(client, "response_done"))[-1].response_done.response
    assert answer.output[0].content[0].text == 'you wrote "cancel my order"'
    await client.close()
