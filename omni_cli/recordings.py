"""Recorded sessions on the command line: ``serve --record``'s flags, ``replay`` and
``recordings list|show|export``.

``replay`` takes keys and TLS as ``talk`` does (``--api-key`` or ``$OMNI_GRPC_API_KEY``,
``--tls``, ``--root-cert``), drives the recording's user side again against ``--target`` (or a
websocket bridge's ``--bridge`` URL), prints a summary, and writes the JSON report and a page
with the latency chart when asked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from omni_grpc.client.talk_cli import DEFAULT_TARGET, LOG_LEVELS

RECORD_POLICIES = ("off", "all", "on-request")


def add_record_flags(serve: Any) -> None:
    """The recording flags of ``serve`` (also ``record_*`` in the TOML file and
    ``OMNI_GRPC_RECORD_*``)."""
    group = serve.add_argument_group(
        "recorded sessions",
        "every command and event of a session with its audio, on disk "
        "(docs/operations.md: what is stored, for how long, how to delete one)",
    )
    group.add_argument(
        "--record",
        choices=RECORD_POLICIES,
        help="record no session, every session, or those whose configuration asks "
        "(SessionConfig.recording; default off)",
    )
    group.add_argument(
        "--record-dir",
        metavar="DIR",
        help="where recordings go, one folder each (default recordings)",
    )
    group.add_argument(
        "--record-redact",
        action="append",
        metavar="WHAT",
        help="leave audio (transcripts and timings only) or text out of every recording; "
        "repeatable, or comma-separated",
    )
    group.add_argument(
        "--record-max-age-days",
        type=float,
        metavar="DAYS",
        help="delete recordings last written longer ago than this (default 30; 0: never)",
    )
    group.add_argument(
        "--record-max-mib",
        type=int,
        metavar="MIB",
        help="delete the oldest recordings while all of them hold more than this "
        "(default 10240; 0: no cap)",
    )


def _locate(recording: str, record_dir: str | None) -> Path:
    path = Path(recording)
    if not path.is_dir() and record_dir:
        path = Path(record_dir) / recording
    return path


def add_replay_parser(commands: Any) -> argparse.ArgumentParser:
    replay = commands.add_parser(
        "replay",
        help="drive a recorded session again against a running service and compare",
        description="Sends the recording's commands at their recorded offsets (audio at real "
        "time, as the engine heard it), then compares the replay with the recording turn by "
        "turn. Exits 1 when the replay could not run, 2 on an unusable recording.",
    )
    replay.set_defaults(handler=run_replay)
    replay.add_argument("recording", help="the recording's folder, DIR/<session_id>")
    replay.add_argument(
        "--target",
        default=os.environ.get("OMNI_GRPC_TARGET", DEFAULT_TARGET),
        help=f"server address host:port (default $OMNI_GRPC_TARGET or {DEFAULT_TARGET})",
    )
    replay.add_argument(
        "--bridge",
        metavar="URL",
        help="replay through a websocket bridge instead, e.g. ws://127.0.0.1:8080/v1/realtime",
    )
    replay.add_argument(
        "--api-key",
        default=os.environ.get("OMNI_GRPC_API_KEY"),
        help="bearer key (default $OMNI_GRPC_API_KEY)",
    )
    replay.add_argument("--tls", action="store_true", help="connect with TLS (system roots)")
    replay.add_argument("--root-cert", metavar="FILE", help="PEM roots to trust (implies --tls)")
    replay.add_argument("--report", metavar="FILE", help="write the comparison as JSON")
    replay.add_argument(
        "--chart",
        metavar="FILE",
        help="write a page with the per-turn latency chart (default: next to --report, .html)",
    )
    replay.add_argument(
        "--log-level", choices=LOG_LEVELS, default="warning", help="log level (default warning)"
    )
    return replay


def run_replay(args: argparse.Namespace) -> int:
    from omni_grpc.client.channel import ChannelSettings
    from omni_grpc.client.recordings import RecordingError
    from omni_grpc.client.replay import ReplayFailed, chart_html, replay_recording, summary

    try:
        root = Path(args.root_cert).read_bytes() if args.root_cert else None
    except OSError as error:
        print(f"omni-grpc replay: {error}", file=sys.stderr)
        return 2
    settings = ChannelSettings(
        target=args.target,
        api_key=args.api_key or None,
        tls=args.tls or root is not None,
        root_certificates=root,
    )
    try:
        document = asyncio.run(replay_recording(Path(args.recording), settings, bridge=args.bridge))
    except RecordingError as error:
        print(f"omni-grpc replay: {error}", file=sys.stderr)
        return 2
    except (ReplayFailed, OSError) as error:
        print(f"omni-grpc replay: the replay failed: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(summary(document))
    if args.report:
        Path(args.report).write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    chart = args.chart or (str(Path(args.report).with_suffix(".html")) if args.report else None)
    if chart:
        Path(chart).write_text(chart_html(document))
    return 0


def add_recordings_parser(commands: Any) -> argparse.ArgumentParser:
    recordings = commands.add_parser(
        "recordings",
        help="list, show or export recorded sessions",
        description="Reads the recordings of a --record-dir (default $OMNI_GRPC_RECORD_DIR or "
        "recordings). To delete one, delete its folder.",
    )
    recordings.set_defaults(handler=run_recordings)
    actions = recordings.add_subparsers(dest="action", required=True, metavar="ACTION")
    default_dir = os.environ.get("OMNI_GRPC_RECORD_DIR", "recordings")
    listed = actions.add_parser("list", help="one line per recording, oldest first")
    shown = actions.add_parser("show", help="one recording: its parts, its end, its turns")
    exported = actions.add_parser("export", help="one recording as a .tar.gz for a bug report")
    for each in (listed, shown, exported):
        each.add_argument("--record-dir", default=default_dir, help="where the recordings are")
        each.add_argument("--json", action="store_true", help="print JSON")
    for each in (shown, exported):
        each.add_argument("recording", help="DIR/<session_id>, or a session id in --record-dir")
    exported.add_argument("--out", metavar="FILE", help="the archive (default <session_id>.tar.gz)")
    return recordings


def run_recordings(args: argparse.Namespace) -> int:
    from omni_grpc.client.recordings import RecordingError, export, listing, load, summary
    from omni_grpc.client.replay.plan import steps_of
    from omni_grpc.client.replay.turns import turns

    try:
        if args.action == "list":
            root = Path(args.record_dir)
            if not root.is_dir():
                print(
                    f"omni-grpc recordings: no recordings: {root.resolve()} is not a folder "
                    "(--record-dir, $OMNI_GRPC_RECORD_DIR)",
                    file=sys.stderr,
                )
                return 2
            rows = listing(root)
            if args.json:
                print(json.dumps(rows, indent=1))
            elif not rows:
                print(f"no recordings in {root.resolve()}")
            for row in [] if args.json else rows:
                print(
                    f"{row['session_id']}  {row['started_at']}  {row['seconds']:8.1f} s  "
                    f"{row['events']:6d} events  {row['end']['reason']:<14} "
                    f"{row['bytes'] / 1024:9.0f} KiB  {', '.join(map(str, row['replicas']))}"
                )
            return 0
        folder = _locate(args.recording, args.record_dir)
        if args.action == "export":
            archive = export(folder, Path(args.out or f"{folder.name}.tar.gz"))
            if args.json:
                written = {"session_id": folder.name, "archive": str(archive.resolve())}
                print(json.dumps(written | {"bytes": archive.stat().st_size}, indent=1))
            else:
                print(archive)
            return 0
        recorded = load(folder)
    except (RecordingError, OSError) as error:
        print(f"omni-grpc recordings: {error}", file=sys.stderr)
        return 2
    shown = summary(recorded)
    shown["parts"] = [
        {
            k: part.entry.get(k)
            for k in ("part", "replica", "started_at", "ended_at", "ended", "stopped")
        }
        for part in recorded.parts
    ]
    shown["turns"] = [turn.as_json() for turn in turns(steps_of(recorded))]
    if args.json:
        print(json.dumps(shown, indent=1, ensure_ascii=False))
        return 0
    for key, value in shown.items():
        if key not in ("turns", "parts"):
            print(f"{key}: {value}")
    for part in shown["parts"]:
        print(f"part {part['part']}: {part['replica']} from {part['started_at']} to "
              f"{part['ended_at'] or '?'}, {part['ended'] or 'not ended'}"
              f"{_stopped(part['stopped'])}")  # fmt: skip
    for turn in shown["turns"]:
        latency = turn["input_end_to_first_audio_ms"]
        print(
            f"turn {turn['index'] + 1}: {turn['input'] or '-'} {turn['said']!r} -> "
            f"{turn['answer']!r} [{turn['status']}, {turn['audio_ms']:.0f} ms audio, first "
            f"audio {'-' if latency is None else f'{latency:.0f} ms'}]"
        )
    return 0


def _stopped(stop: dict[str, Any] | None) -> str:
    if not stop:
        return ""
    return f" (stopped: {stop['reason']} after event {stop['last_seq']})"


__all__ = ["add_record_flags", "add_recordings_parser", "add_replay_parser"]
