"""What each subcommand of ``omni-grpc`` runs, once its flags are parsed (:mod:`.parser`).

The gRPC server, the bridge and the benchmark are imported only when their subcommand runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from omni_cli.config import (
    BridgeSettings,
    ConfigError,
    ServeSettings,
    resolve_bridge_settings,
    resolve_serve_settings,
)
from omni_cli.logs import configure_logging
from omni_grpc.wire.keys import LABEL_SECRET_ENV, key_label, use_label_secret

_Settings = TypeVar("_Settings", ServeSettings, BridgeSettings)


def _run(
    name: str, log_level: str, log_format: str, run: Callable[[], Coroutine[Any, Any, None]]
) -> int:
    """Runs a long-lived subcommand on uvloop; turns start-up failures into exit codes."""
    configure_logging(log_level, log_format)
    import uvloop

    try:
        uvloop.run(run())
    except ValueError as error:  # an unknown engine, a bad engine option, a bad key file
        print(f"omni-grpc {name}: {error}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as error:  # the port is taken, a file is missing, ...
        print(f"omni-grpc {name}: cannot start: {error}", file=sys.stderr)
        return 1
    return 0


def run_key_label(args: argparse.Namespace) -> int:
    """Prints the label the metrics count a key under (the key read from standard input, so
    that it is on no command line)."""
    use_label_secret(os.environ)
    if not os.environ.get(LABEL_SECRET_ENV):
        print(
            f"omni-grpc key-label: {LABEL_SECRET_ENV} is not set: each process labels keys "
            "with a secret of its own, so no label can be told from here",
            file=sys.stderr,
        )
        return 2
    key = sys.stdin.readline().strip()
    if not key:
        print("omni-grpc key-label: no key on standard input", file=sys.stderr)
        return 2
    print(key_label(key))
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from omni_cli import launch

    return _run_resolved("serve", args, resolve_serve_settings, launch.serve)


def run_bridge(args: argparse.Namespace) -> int:
    from omni_cli import launch

    return _run_resolved("bridge", args, resolve_bridge_settings, launch.run_bridge)


def _run_resolved(
    name: str,
    args: argparse.Namespace,
    resolve: Callable[[argparse.Namespace, Mapping[str, str]], _Settings],
    run: Callable[[_Settings], Coroutine[Any, Any, None]],
) -> int:
    """Resolves a subcommand's settings (exit 2 on a bad one), then runs it."""
    try:
        settings = resolve(args, os.environ)
    except ConfigError as error:
        print(f"omni-grpc {name}: {error}", file=sys.stderr)
        return 2
    use_label_secret(os.environ)
    return _run(name, settings.log_level, settings.log_format, lambda: run(settings))


def run_replay(args: argparse.Namespace) -> int:
    from omni_cli.recordings import run_replay

    configure_logging(args.log_level, "text")
    return run_replay(args)


def run_talk(args: argparse.Namespace) -> int:
    from omni_grpc.client.talk_cli import run_talk

    configure_logging(args.log_level, args.log_format)
    return run_talk(args)


def run_bench(args: argparse.Namespace) -> int:
    from omni_grpc.bench.service import main as bench

    return bench(args.bench_args)


__all__ = ["run_bench", "run_bridge", "run_replay", "run_serve", "run_talk"]
