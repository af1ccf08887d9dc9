"""SessionConfig.truncation over gRPC, with the resuming Python client on the loopback engine:
the configuration in force and the capabilities say it, each response's usage says what it
read after the cut, and a truncation out of bounds is refused naming its field."""

from __future__ import annotations

from omni_grpc.client import DuplexClient
from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from tests.client.conftest import CONFIG, OPTIONS, collect_until

# Half of 12 tokens kept at each cut: a typed turn "a b c d" is 4, its answer
# ('you wrote "a b c d"') 6.
RATIO = pb.Truncation(
    type=pb.TRUNCATION_TYPE_RETENTION_RATIO, retention_ratio=0.5, post_instructions_token_limit=12
)


async def test_the_client_sets_a_truncation_and_usage_says_what_was_read(
    server: RunningServer,
) -> None:
    config = pb.SessionConfig()
    config.CopyFrom(CONFIG)
    config.truncation.CopyFrom(RATIO)
    client = await DuplexClient.connect(server.target, config=config, options=OPTIONS)
    try:
        assert client.capabilities.supports_truncation
        assert client.session.config.truncation == RATIO
        read = []
        for _ in range(3):
            await client.create_item(
                pb.ConversationItem(
                    role=pb.ITEM_ROLE_USER,
                    content=[pb.ContentPart(type=pb.CONTENT_TYPE_INPUT_TEXT, text="a b c d")],
                )
            )
            await client.create_response()
            done = (await collect_until(client, "response_done"))[-1].response_done.response
            assert done.status == pb.RESPONSE_STATUS_COMPLETED
            read.append(done.usage.input_tokens)
        # The first turn reads its 4 tokens; each later one would read 14, over 12, and is cut
        # to at most 6: the turn alone.
        assert read == [4, 4, 4]

        bad = pb.Truncation(type=pb.TRUNCATION_TYPE_DISABLED, post_instructions_token_limit=10)
        seq = await client.update_session(pb.SessionConfig(truncation=bad))
        error = (await collect_until(client, "error"))[-1].error
        assert (error.code, error.param, error.client_seq) == (
            "invalid_session_config",
            "truncation.post_instructions_token_limit",
            seq,
        )
        await client.update_session(
            pb.SessionConfig(truncation=pb.Truncation(type=pb.TRUNCATION_TYPE_DISABLED))
        )
        updated = (await collect_until(client, "session_updated"))[-1].session_updated
        # Replaced whole: the ratio and limit of the old one do not stay.
        assert updated.session.config.truncation == pb.Truncation(type=pb.TRUNCATION_TYPE_DISABLED)
    finally:
        await client.close()
