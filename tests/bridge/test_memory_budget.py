"""The memory budget through the bridge: an append past it gets OpenAI's rate-limit error, the
socket and the other sessions go on, and a commit makes room again."""

from __future__ import annotations

import base64
from typing import Any

from omni_grpc.core import Limits
from tests.bridge.testkit import WITH_EXTENSIONS, realtime_socket, running_bridge, service_settings
from tests.serving import eventually, serving

BUDGET = 100_000  # canonical bytes: 16 kHz pcm16, two thirds of the 24 kHz the sockets send
NO_TURN_DETECTION = {
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}


def append(event_id: str, size: int) -> dict[str, str]:
    audio = base64.b64encode(b"\x00\x08" * (size // 2)).decode()
    return {"type": "input_audio_buffer.append", "event_id": event_id, "audio": audio}


async def commit(socket: Any, event_id: str) -> list[dict[str, Any]]:
    await socket.send({"type": "input_audio_buffer.commit", "event_id": event_id})
    events: list[dict[str, Any]] = await socket.until("input_audio_buffer.committed")
    return events


async def test_an_append_past_the_budget_gets_a_rate_limit_error_and_the_socket_goes_on() -> None:
    limits = Limits(disconnect_grace_s=5.0, memory_budget_bytes=BUDGET)
    async with (
        serving(service_settings(limits=limits)) as service,
        running_bridge(service.target) as port,
        # Duplex clients: the test reads the retry hint's extension fields.
        realtime_socket(port, WITH_EXTENSIONS) as first,
        realtime_socket(port, WITH_EXTENSIONS) as second,
    ):
        for socket in (first, second):
            await socket.recv()  # session.created
            await socket.send(NO_TURN_DETECTION)
            await socket.until("session.updated")

        await first.send(append("a1", 90_000))  # 60 000 canonical bytes
        # Held before the other socket speaks (the two sockets reach the service in any order).
        await eventually(lambda: service.sessions.budget.held >= 60_000)
        await second.send(append("b1", 90_000))  # would be 120 000 in all
        refused = await second.recv()
        assert refused["type"] == "error", refused
        body = refused["error"]
        assert (body["type"], body["code"], body["event_id"]) == (
            "rate_limit_error",
            "input_backpressure",
            "b1",
        )
        assert body["retryable"] is True and body["retry_after_ms"] == 1000

        # The refused socket goes on with what fits; the other one was never touched.
        await second.send(append("b2", 30_000))
        assert "error" not in [e["type"] for e in await commit(second, "b3")]
        assert "error" not in [e["type"] for e in await commit(first, "a2")]
        # Both commits gave their input back: the refused append fits now.
        await second.send(append("b4", 90_000))
        assert "error" not in [e["type"] for e in await commit(second, "b5")]
        # What is still queued for the sockets goes back as they read it.
        await eventually(lambda: service.sessions.budget.held == 0)
