"""Replaying a recorded session against a running service (``omni-grpc replay``).

The user's side of the recording is driven again with its recorded pacing: audio at real time
as it was heard by the engine, typed text, tool outputs, acknowledgements and interruptions at
their recorded offsets (:mod:`.plan`), over gRPC (:mod:`.grpc_driver`) or through the websocket
bridge (:mod:`.ws_driver`), and the two conversations are compared (:mod:`.report`, turn by
turn with :mod:`.turns`).
"""

from __future__ import annotations

from pathlib import Path

from omni_grpc.client.channel import ChannelSettings
from omni_grpc.client.recordings import load
from omni_grpc.client.replay.grpc_driver import ReplayFailed, ReplayRun, replay_grpc
from omni_grpc.client.replay.plan import Plan, plan
from omni_grpc.client.replay.report import chart_html, report, summary


async def replay_recording(
    folder: Path,
    settings: ChannelSettings,
    *,
    bridge: str | None = None,
) -> dict[str, object]:
    """Replays the recording in ``folder`` against ``settings.target`` (or, with ``bridge``, a
    websocket bridge's URL); returns the report (see :func:`.report.report`)."""
    recorded = load(folder)
    planned = plan(recorded)
    if bridge is None:
        run = await replay_grpc(planned, settings)
        target, via = settings.target, "grpc"
    else:
        from omni_grpc.client.replay.ws_driver import replay_ws

        run = await replay_ws(planned, bridge, api_key=settings.api_key)
        target, via = bridge, "websocket bridge"
    document = report(
        recorded.session_id,
        target,
        via,
        planned.recorded,
        run.steps,
        run.pacing,
        [command.kind for command in planned.commands],
        compare_events=bridge is None,
    )
    document["replay_session"] = run.session_id
    document["replay_ended"] = run.ended
    return document


__all__ = [
    "Plan",
    "ReplayFailed",
    "ReplayRun",
    "chart_html",
    "plan",
    "replay_grpc",
    "replay_recording",
    "summary",
]
