"""The embedded engine and a vLLM-Omni client's model options: the bridge's vLLM-Omni dialect
passes a client's ``extra_body`` and ``ref_audio`` on as engine options of those names, whatever
the engine. They mean nothing here and are no mistake, so a session opens without an error;
a name that is neither the engine's nor those is still reported."""

from __future__ import annotations

import asyncio

from google.protobuf import struct_pb2

from omni_grpc.core.config import resolve_config
from omni_grpc.core.limits import Limits
from omni_grpc.engine.embedded import EmbeddedEngine
from omni_grpc.wire import pb

from .driver import Driver


async def opened(engine: EmbeddedEngine, options: dict[str, object]) -> Driver:
    given = struct_pb2.Struct()
    given.update(options)
    config = resolve_config(pb.SessionConfig(engine_options=given), Limits(), engine.features)
    return Driver(await engine.open_session("test", config))


async def test_vllm_omnis_model_options_are_left_be(engine: EmbeddedEngine) -> None:
    foreign = {
        "pace": "fast",
        "extra_body": {"auto_response": True, "force_listen_count": 0},
        "ref_audio": "data:audio/wav;base64,AAAA",
    }
    driver = await opened(engine, foreign)
    try:
        await driver.send(append_input_text=pb.AppendInputText(text="hello"))
        await driver.send(create_response=pb.CreateResponse())
        await driver.until("response_done")
    finally:
        await driver.close()
    assert not driver.of("error")


async def test_another_unknown_option_is_still_reported(engine: EmbeddedEngine) -> None:
    driver = await opened(engine, {"pace": "fast", "auto_response": True})
    try:
        error = (await asyncio.wait_for(driver.until("error"), 10)).error
    finally:
        await driver.close()
    assert (error.code, error.param) == ("invalid_session_config", "engine_options")
