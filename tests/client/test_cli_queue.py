"""The admission queue's settings of ``omni-grpc serve`` (flags, the TOML file, OMNI_GRPC_*
variables) and the agent check a replica answers HAProxy with."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import grpc
import pytest

from omni_cli import ConfigError, build_parser, resolve_serve_settings
from omni_cli.launch import start_service
from omni_grpc.core.limits import Limits
from omni_grpc.engine.loopback import LoopbackEngine
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.agent import agent_reply
from omni_grpc.server.settings import QueueSettings
from omni_grpc.server.waiting import session_queue
from tests.server.streams import open_stream


def serve(*flags: str, env: dict[str, str] | None = None) -> object:
    return resolve_serve_settings(build_parser().parse_args(["serve", *flags]), env or {})


def test_no_queue_unless_a_capacity_is_set() -> None:
    assert serve().server.queue is None  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="queue_max_wait_s need"):
        serve("--queue-max-wait-s", "30")


def test_queue_settings_layer_file_then_env_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "omni.toml"
    config.write_text(
        'capacity = "auto"\nqueue_max_length = 10\nagent_port = 7000\n'
        '[priority_classes]\ngold = ["g1", "g2"]\ndefault = []\nbronze = ["b1"]\n'
    )
    from_file = serve("--config", str(config)).server.queue  # type: ignore[attr-defined]
    assert from_file == QueueSettings(
        capacity=0,
        max_length=10,
        classes=(("gold", ("g1", "g2")), ("default", ()), ("bronze", ("b1",))),
    )
    env = {
        "OMNI_GRPC_CONFIG": str(config),
        "OMNI_GRPC_CAPACITY": "8",
        "OMNI_GRPC_QUEUE_MAX_WAIT_S": "30",
        "OMNI_GRPC_PRIORITY_CLASSES": "silver=s1,s2;gold=g9",
    }
    resolved = serve(env=env)
    queue = resolved.server.queue  # type: ignore[attr-defined]
    assert (queue.capacity, queue.max_length, queue.max_wait_s) == (8, 10, 30.0)
    assert queue.classes == (("silver", ("s1", "s2")), ("gold", ("g9",)))
    assert resolved.agent_port == 7000  # type: ignore[attr-defined]
    flagged = serve(
        "--capacity",
        "3",
        "--queue-max-overtakes",
        "2",
        "--priority-class",
        "vip=v1",
        "--agent-port",
        "0",
        env=env,
    )
    queue = flagged.server.queue  # type: ignore[attr-defined]
    assert (queue.capacity, queue.max_overtakes, queue.classes) == (3, 2, (("vip", ("v1",)),))
    assert flagged.agent_port == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--capacity", "0"], {}, "capacity must be at least 1"),
        (["--capacity", "many"], {}, "capacity must be a whole number"),
        (["--capacity", "2", "--queue-max-overtakes", "0"], {}, "at least 1"),
        (["--capacity", "2", "--queue-max-wait-s", "0"], {}, "must be positive"),
        (["--capacity", "2", "--priority-class", "a=k", "--priority-class", "b=k"], {}, "two"),
        (["--capacity", "2", "--priority-class", "nokeys"], {}, "expected KEY=VALUE"),
        ([], {"OMNI_GRPC_AGENT_PORT": "x"}, "agent_port must be a port number"),
    ],
)
def test_bad_queue_settings_are_refused(
    flags: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        serve(*flags, env=env)


def test_the_capacity_is_the_engines_or_less_and_never_past_max_sessions() -> None:
    limits = Limits(max_sessions=10)
    assert session_queue(QueueSettings(), limits, 4).policy.capacity == 4  # auto
    assert session_queue(QueueSettings(capacity=2), limits, 4).policy.capacity == 2
    assert session_queue(QueueSettings(capacity=8), limits, 4).policy.capacity == 4
    assert session_queue(QueueSettings(capacity=20), limits, 0).policy.capacity == 10
    assert session_queue(QueueSettings(), limits, 0).policy.capacity == 10
    classes = (("gold", ("g",)),)
    policy = session_queue(QueueSettings(classes=classes), limits, 4).policy
    assert policy.classes == ("gold", "default")  # default last unless named
    assert policy.grace_s == limits.disconnect_grace_s
    assert LoopbackEngine({"capacity": "5"}).features.capacity == 5
    assert LoopbackEngine().features.capacity == 64


def test_the_agent_says_the_share_of_free_places() -> None:
    assert agent_reply(4, 4) == "ready 100%"
    assert agent_reply(1, 4) == "ready 25%"
    assert agent_reply(0, 4) == "ready 1%"  # full: still a little, so all-full spreads
    assert agent_reply(3, 4, draining=True) == "drain"


async def ask_agent(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return (await asyncio.wait_for(reader.read(), 10)).decode().strip()
    finally:
        writer.close()


async def test_a_replica_answers_the_agent_check_with_its_room() -> None:
    settings = serve(
        *("--engine", "loopback", "--engine-option", "pace=fast"),
        *("--grpc-port", "0", "--http-port", "0", "--capacity", "2", "--agent-port", "0"),
    )
    service = await start_service(dataclasses.replace(settings))  # type: ignore[type-var]
    try:
        assert service.agent_port
        assert await ask_agent(service.agent_port) == "ready 100%"
        async with grpc.aio.insecure_channel(service.server.target) as channel:
            stub = duplex_pb2_grpc.DuplexServiceStub(channel)
            first, _ = await open_stream(stub)
            assert await ask_agent(service.agent_port) == "ready 50%"
            second, _ = await open_stream(stub)
            assert await ask_agent(service.agent_port) == "ready 1%"
            status, health = service.server.readiness()
            assert status and (health["capacity"], health["free"], health["queued"]) == (2, 0, 0)
            for call in (first, second):
                call.cancel()
        service.server.draining = True
        assert await ask_agent(service.agent_port) == "drain"
    finally:
        await service.stop()
