"""Replaying over gRPC: one Converse stream, the plan's commands at their recorded offsets.

The session opens with the recorded configuration; each command then goes out when its offset
(from ``session_created``) has passed on the replay's clock, and every event is kept with the
time it arrived. After the last command the replay waits as long as the recording went on
after it (plus a little), then closes the session if the recording did not.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from omni_grpc.client.channel import ChannelSettings, Connection
from omni_grpc.client.replay.plan import IdMap, Plan
from omni_grpc.client.replay.turns import Step, digest
from omni_grpc.wire import pb
from omni_grpc.wire.recording import message_json
from omni_grpc.wire.stream_end import StreamBroken

SETTLE_S = 2.0  # how long the replay waits for answers beyond the recording's last event
ENDINGS = frozenset({"session_closed", "session_expired"})


class ReplayFailed(Exception):
    """The replay could not open its session, or its stream broke."""


@dataclass
class ReplayRun:
    """What a replay sent and received, on its own clock."""

    session_id: str = ""
    steps: list[Step] = field(default_factory=list)
    # (command kind, recorded offset s, sent offset s): how closely the pacing was kept.
    pacing: list[tuple[str, float, float]] = field(default_factory=list)
    ended: str = ""


def event_step(event: pb.ConverseResponse, t: float) -> Step:
    """An event as a :class:`Step`, its audio by length and digest, never a resume token."""
    kind = event.WhichOneof("event") or ""
    inner = getattr(event, kind)
    audio = {}
    if kind == "output_audio_delta":
        audio = {"bytes": len(inner.audio), "blake2b": digest(inner.audio)}
        inner.audio = b""
    elif kind in ("session_created", "session_resumed"):
        inner.resume_token = ""
    return Step(t, "event" if event.seq else "stream", kind, message_json(inner), audio)


async def replay_grpc(
    plan: Plan, settings: ChannelSettings, *, settle_s: float = SETTLE_S
) -> ReplayRun:
    """Runs ``plan`` against the server ``settings`` name; raises ReplayFailed."""
    connection = Connection(settings)
    run = ReplayRun()
    ids = IdMap(plan.recorded)
    ended = asyncio.Event()
    last_seq = 0
    try:
        stream = connection.converse()
        await stream.write(pb.ConverseRequest(open_session=pb.OpenSession(config=plan.config)))
        first = await stream.read()
        if first is None or not first.HasField("session_created"):
            raise ReplayFailed(f"the server answered the open with {first}")
        opened = time.monotonic()
        run.session_id = first.session_created.session.id
        run.steps.append(event_step(first, opened))

        async def read() -> None:
            nonlocal last_seq
            try:
                while (event := await stream.read()) is not None:
                    step = event_step(event, time.monotonic())
                    run.steps.append(step)
                    if step.type == "event":
                        ids.saw(step)
                        last_seq = max(last_seq, event.seq)
                    if step.kind in ENDINGS:
                        run.ended = step.kind
            except StreamBroken as broken:
                run.ended = run.ended or f"stream broke: {broken}"
            finally:
                ended.set()

        reader = asyncio.create_task(read())
        number = 0
        for planned in plan.commands:
            delay = opened + planned.offset_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if ended.is_set():
                break
            number += planned.numbered
            request = ids.request(planned, number if planned.numbered else 0, last_seq)
            sent = time.monotonic()  # when it is handed to the stream: its send time
            await stream.write(request)
            run.pacing.append((planned.kind, planned.offset_s, sent - opened))
            run.steps.append(Step(sent, "command", planned.kind, planned.body))
        if not ended.is_set():
            quiet = opened + plan.last_event_offset_s + settle_s - time.monotonic()
            if run.pacing and run.pacing[-1][0] != "close_session":
                await _wait(ended, max(quiet, settle_s))
                if not ended.is_set():
                    number += 1
                    close = pb.ConverseRequest(client_seq=number, close_session=pb.CloseSession())
                    await stream.write(close)
            await _wait(ended, max(quiet, settle_s) + 10.0)
        stream.cancel()
        reader.cancel()
    except StreamBroken as broken:
        raise ReplayFailed(str(broken)) from None
    finally:
        await connection.close()
    return run


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        pass


__all__ = ["ReplayFailed", "ReplayRun", "event_step", "replay_grpc"]
