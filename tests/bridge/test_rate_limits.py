"""Rate limits through the bridge: a flooding socket gets OpenAI's rate-limit errors and
``rate_limits.updated``, goes on after the wait, and another socket is untouched.

The service runs on a :class:`~tests.serving.FakeClock`, so its buckets refill only when the
test moves the clock.
"""

from __future__ import annotations

import base64

from omni_grpc.core import Limits
from tests.bridge.testkit import WITH_EXTENSIONS, realtime_socket, running_bridge, service_settings
from tests.serving import FakeClock, serving

LIMITS = Limits(
    disconnect_grace_s=5.0,
    session_commands_per_s=20.0,
    session_audio_bytes_per_s=1_000_000.0,
    rate_burst_s=1.0,
)


def append(event_id: str) -> dict[str, str]:
    # 10 ms of 24 kHz pcm16, the shape of a stock client's chunk stream.
    audio = base64.b64encode(b"\x00\x08" * 240).decode()
    return {"type": "input_audio_buffer.append", "event_id": event_id, "audio": audio}


async def test_a_flooding_socket_gets_rate_limit_errors_and_goes_on_after_the_wait() -> None:
    clock = FakeClock()
    async with (
        serving(service_settings(limits=LIMITS), clock=clock) as service,
        running_bridge(service.target) as port,
        # Duplex clients: the test reads the retry hint's extension fields.
        realtime_socket(port, WITH_EXTENSIONS) as flooder,
        realtime_socket(port, WITH_EXTENSIONS) as bystander,
    ):
        await flooder.recv()  # session.created
        await bystander.recv()
        for n in range(1, 31):
            await flooder.send(append(f"a{n}"))
        refused = [await flooder.recv() for _ in range(20)]  # ten errors, each with its update
        errors, updates = refused[0::2], refused[1::2]
        assert [e["error"]["event_id"] for e in errors] == [f"a{n}" for n in range(21, 31)]
        for error, update in zip(errors, updates, strict=True):
            assert error["type"] == "error"
            body = error["error"]
            assert (body["type"], body["code"]) == ("rate_limit_error", "rate_limit_exceeded")
            assert (body["retryable"], body["retry_after_ms"]) == (True, 50)
            assert update["type"] == "rate_limits.updated"
            assert update["rate_limits"] == [
                {"name": "requests", "remaining": 0, "reset_seconds": 0.05}
            ]

        # Another socket is untouched.
        await bystander.send(append("b1"))
        await bystander.send({"type": "input_audio_buffer.commit", "event_id": "b2"})
        await bystander.send({"type": "response.create", "event_id": "b3"})
        assert "error" not in [e["type"] for e in await bystander.until("response.done")]

        # After the wait (two hints: two events follow), the flooder's next events are applied,
        # and its 20 appends that passed are the turn.
        clock.advance(0.1)
        await flooder.send({"type": "input_audio_buffer.commit", "event_id": "c1"})
        await flooder.send({"type": "response.create", "event_id": "c2"})
        events = await flooder.until("response.done")
        assert "error" not in [e["type"] for e in events]
        assert events[-1]["response"]["status"] == "completed"
