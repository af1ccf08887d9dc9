"""The ``talk`` subcommand of ``omni-grpc``: its flags, and turning them into a talk run.

The ``omni-grpc`` command sets up logging (``--log-level``, ``--log-format``) before the run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omni_grpc.client.talk import TalkSettings, talk
from omni_grpc.client.wavio import AudioInputError, read_audio

DEFAULT_TARGET = "127.0.0.1:50051"
LOG_LEVELS = ("debug", "info", "warning", "error")


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def add_talk_parser(commands: Any) -> argparse.ArgumentParser:
    """Adds ``talk`` to the subcommands of the ``omni-grpc`` parser; returns its parser."""
    talk = commands.add_parser(
        "talk",
        help="say a WAV or raw pcm16 file to a server and save the reply",
        description="Streams the file at real-time pace (or --fast), ends the turn with a "
        "commit (or server VAD with --vad), prints events compactly, transcripts, and per "
        "turn TTFT / TTFP (end of input to first text / first audio, client clock) and RTF. "
        "Progress goes to stderr. Exits 1 on a failed session, 2 on unusable input.",
    )
    talk.set_defaults(handler=run_talk)
    talk.add_argument(
        "input",
        help="WAV file (PCM, any rate or width; channels are mixed), "
        "or raw mono pcm16 with --raw-rate",
    )
    talk.add_argument(
        "--target",
        default=os.environ.get("OMNI_GRPC_TARGET", DEFAULT_TARGET),
        help=f"server address host:port (default $OMNI_GRPC_TARGET or {DEFAULT_TARGET})",
    )
    talk.add_argument(
        "--raw-rate", type=_positive(int), metavar="HZ", help="read INPUT as raw pcm16 at this rate"
    )
    talk.add_argument(
        "--fast", action="store_true", help="send as fast as possible, not in real time"
    )
    talk.add_argument(
        "--vad", action="store_true", help="let server VAD end the turn (needs an engine with VAD)"
    )
    talk.add_argument(
        "--chunk-ms",
        type=_positive(int),
        default=100,
        metavar="MS",
        help="audio per append (default 100)",
    )
    talk.add_argument("--out", metavar="FILE", help="save the reply audio as WAV")
    talk.add_argument(
        "--api-key",
        default=os.environ.get("OMNI_GRPC_API_KEY"),
        help="bearer key (default $OMNI_GRPC_API_KEY)",
    )
    talk.add_argument("--tls", action="store_true", help="connect with TLS (system roots)")
    talk.add_argument("--root-cert", metavar="FILE", help="PEM roots to trust (implies --tls)")
    talk.add_argument("--instructions", help="system instructions for the session")
    talk.add_argument("--voice", help="output voice")
    talk.add_argument("--text", action="store_true", help="ask for text answers, not audio")
    talk.add_argument(
        "--timeout",
        type=_positive(float),
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the answer (default 60)",
    )
    talk.add_argument(
        "-v", "--verbose", action="store_true", help="print every event, deltas included"
    )
    talk.add_argument(
        "--log-level", choices=LOG_LEVELS, default="warning", help="log level (default warning)"
    )
    return talk


def run_talk(args: argparse.Namespace) -> int:
    """Runs ``omni-grpc talk``; returns the exit status."""
    try:
        audio = read_audio(args.input, raw_rate_hz=args.raw_rate)
        root = Path(args.root_cert).read_bytes() if args.root_cert else None
    except (AudioInputError, OSError) as error:
        print(f"omni-grpc talk: {error}", file=sys.stderr)
        return 2
    settings = TalkSettings(
        target=args.target,
        audio=audio,
        api_key=args.api_key or None,
        tls=args.tls or root is not None,
        root_certificates=root,
        fast=args.fast,
        vad=args.vad,
        chunk_ms=args.chunk_ms,
        out_path=args.out,
        instructions=args.instructions,
        voice=args.voice,
        text_only=args.text,
        timeout_s=args.timeout,
        verbose=args.verbose,
    )
    return asyncio.run(talk(settings, out=sys.stdout, err=sys.stderr))
