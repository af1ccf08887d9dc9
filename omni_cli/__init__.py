"""The ``omni-grpc`` command: ``serve``, ``bridge`` alone, ``talk``, ``replay``, ``recordings``,
``bench``.

This is the package's face: :func:`main`. The flags of each subcommand are
:mod:`omni_cli.parser`, what each runs :mod:`omni_cli.run`; how ``serve`` and ``bridge`` merge
their settings is :mod:`omni_cli.config`, what they run :mod:`omni_cli.launch`, and the
benchmark is :mod:`omni_grpc.bench.service`. The gRPC server, the bridge and the benchmark are
imported only when their subcommand runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import omni_cli.grpc_fork  # noqa: F401  (first: gRPC reads its fork setting when imported)
from omni_cli.config import ConfigError, resolve_bridge_settings, resolve_serve_settings
from omni_cli.parser import build_parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    parser = build_parser()
    # argparse's REMAINDER misses leading options ("bench --quick"), so bench takes the rest.
    args, extra = parser.parse_known_args(argv)
    if args.command == "bench":
        args.bench_args = [*extra, *args.bench_args]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


__all__ = [
    "ConfigError",
    "build_parser",
    "main",
    "resolve_bridge_settings",
    "resolve_serve_settings",
]
