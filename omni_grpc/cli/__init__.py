"""The ``omni-grpc`` command: ``serve`` the service, ``talk`` to it with a file, ``bench`` it.

``serve`` reads its settings from, in rising precedence: the built-in defaults, a TOML file
(``--config`` or ``OMNI_GRPC_CONFIG``), ``OMNI_GRPC_*`` environment variables, and flags. The
TOML keys are the flag names with underscores (``grpc_port = 50051``); ``engine_options`` is a
table and ``api_keys`` a list, and a ``[limits]`` table sets any field of the server limits.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import omni_grpc
from omni_grpc.client.talk_cli import LOG_FORMAT, LOG_LEVELS, add_talk_parser
from omni_grpc.core.limits import Limits
from omni_grpc.engine import known_engines
from omni_grpc.server.settings import ServerSettings

ENV_PREFIX = "OMNI_GRPC_"
BENCH_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_grpc.py"


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it."""


def default_engine() -> str:
    """The engine ``serve`` runs when none is named: the embedded one where it exists."""
    return "embedded" if "embedded" in known_engines() else "loopback"


def _key_values(items: Sequence[str], what: str) -> dict[str, str]:
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what}: expected KEY=VALUE, got {item!r}")
        result[key.strip()] = value.strip()
    return result


def _port(value: Any, name: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a port number, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{name} must be in 0..65535, got {port}")
    return port


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


# serve setting -> how to read it from an environment variable's text.
_ENV_READERS: dict[str, Callable[[str], Any]] = {
    "host": str,
    "grpc_port": str,
    "http_port": str,
    "engine": str,
    "engine_options": lambda text: _key_values(_split(text), "OMNI_GRPC_ENGINE_OPTIONS"),
    "api_keys": _split,
    "tls_cert": str,
    "tls_key": str,
    "max_sessions": str,
    "shutdown_grace_s": str,
    "log_level": str,
}


def load_config_file(path: str) -> dict[str, Any]:
    """Reads a TOML settings file; raises ConfigError for a bad file or an unknown key."""
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None
    unknown = sorted(set(data) - set(_ENV_READERS) - {"limits"})
    if unknown:
        raise ConfigError(
            f"{path}: unknown setting(s) {', '.join(unknown)}; known: "
            f"{', '.join(sorted([*_ENV_READERS, 'limits']))}"
        )
    return data


def _env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    return {
        key: read(environ[ENV_PREFIX + key.upper()])
        for key, read in _ENV_READERS.items()
        if environ.get(ENV_PREFIX + key.upper(), "") != ""
    }


def _flag_layer(args: argparse.Namespace) -> dict[str, Any]:
    layer = {
        key: getattr(args, key)
        for key in _ENV_READERS
        if key not in ("engine_options", "api_keys") and getattr(args, key) is not None
    }
    if args.engine_option:
        layer["engine_options"] = _key_values(args.engine_option, "--engine-option")
    if args.api_key:
        layer["api_keys"] = list(args.api_key)
    return layer


def _limits(values: Mapping[str, Any], max_sessions: Any) -> Limits:
    known = {f.name: f.type for f in fields(Limits)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown limit(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    chosen = dict(values)
    if max_sessions is not None:
        chosen["max_sessions"] = max_sessions
    try:
        converted: dict[str, Any] = {
            name: (int if known[name] == "int" else float)(value) for name, value in chosen.items()
        }
    except (TypeError, ValueError) as error:
        raise ConfigError(f"bad limit value: {error}") from None
    if any(value <= 0 for value in converted.values()):
        raise ConfigError("every limit must be positive")
    return Limits(**converted)


def resolve_serve_settings(
    args: argparse.Namespace, environ: Mapping[str, str]
) -> tuple[ServerSettings, str]:
    """Merges defaults, file, environment and flags into ServerSettings and a log level."""
    merged: dict[str, Any] = {}
    options: dict[str, str] = {}
    limits: dict[str, Any] = {}
    path = args.config or environ.get(ENV_PREFIX + "CONFIG")
    layers = [load_config_file(path)] if path else []
    layers += [_env_layer(environ), _flag_layer(args)]
    for layer in layers:
        # Engine options merge key by key; every other setting is replaced by a later layer.
        options.update({str(k): str(v) for k, v in dict(layer.get("engine_options", {})).items()})
        limits.update(layer.get("limits", {}))
        merged.update({k: v for k, v in layer.items() if k not in ("engine_options", "limits")})
    http_port = _port(merged.get("http_port", 8080), "http_port")
    level = str(merged.get("log_level", "info")).lower()
    if level not in LOG_LEVELS:
        raise ConfigError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    try:
        grace_s = float(merged.get("shutdown_grace_s", 10.0))
    except ValueError:
        raise ConfigError("shutdown_grace_s must be a number of seconds") from None
    if (merged.get("tls_cert") is None) != (merged.get("tls_key") is None):
        raise ConfigError("TLS needs both a certificate and its key (--tls-cert, --tls-key)")
    settings = ServerSettings(
        host=str(merged.get("host", "127.0.0.1")),
        grpc_port=_port(merged.get("grpc_port", 50051), "grpc_port"),
        http_port=http_port or None,  # 0 turns the websocket bridge off
        engine=str(merged.get("engine", default_engine())),
        engine_options=options,
        api_keys=tuple(str(key) for key in merged.get("api_keys", ())),
        tls_cert_file=merged.get("tls_cert"),
        tls_key_file=merged.get("tls_key"),
        limits=_limits(limits, merged.get("max_sessions")),
        shutdown_grace_s=grace_s,
    )
    return settings, level


def _run_serve(args: argparse.Namespace) -> int:
    try:
        settings, level = resolve_serve_settings(args, os.environ)
    except ConfigError as error:
        print(f"omni-grpc serve: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
    import uvloop

    from omni_grpc.server.app import serve

    try:
        uvloop.run(serve(settings))
    except ValueError as error:  # an unknown engine or a bad engine option
        print(f"omni-grpc serve: {error}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as error:  # the port is taken, a file is missing, ...
        print(f"omni-grpc serve: cannot start: {error}", file=sys.stderr)
        return 1
    return 0


def _run_bench(args: argparse.Namespace) -> int:
    if not BENCH_SCRIPT.is_file():
        print(
            "omni-grpc bench: the benchmark is scripts/bench_grpc.py in a source checkout; "
            "it is not part of this installation",
            file=sys.stderr,
        )
        return 2
    spec = importlib.util.spec_from_file_location("omni_grpc_bench", BENCH_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    saved, sys.argv = sys.argv, [str(BENCH_SCRIPT), *args.bench_args]
    try:
        result = module.main()
    finally:
        sys.argv = saved
    return int(result or 0)


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the gRPC service (and the websocket bridge)",
        description="Runs the service until SIGTERM or SIGINT, then drains: sessions are told "
        "to go, and the server stops once they have or the grace period ends. Every flag "
        "also reads from OMNI_GRPC_<NAME> (e.g. OMNI_GRPC_GRPC_PORT) and from --config.",
    )
    serve.set_defaults(handler=_run_serve)
    serve.add_argument(
        "--config",
        metavar="FILE",
        help="TOML settings file (keys as the flags, "
        "with underscores; [limits] table for server limits)",
    )
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--grpc-port", type=int, help="gRPC port (default 50051; 0 picks one)")
    serve.add_argument(
        "--http-port", type=int, help="websocket bridge port (default 8080; 0 turns the bridge off)"
    )
    serve.add_argument(
        "--engine",
        help=f"engine to serve: {', '.join(known_engines())} (default {default_engine()})",
    )
    serve.add_argument(
        "--engine-option",
        action="append",
        metavar="KEY=VALUE",
        help="engine-specific option, repeatable (e.g. pace=fast)",
    )
    serve.add_argument(
        "--api-key",
        action="append",
        metavar="KEY",
        help="require this bearer key; repeatable. Keys on a command line are "
        "visible to other users: prefer OMNI_GRPC_API_KEYS (comma-separated) "
        "or the config file",
    )
    serve.add_argument("--tls-cert", metavar="FILE", help="PEM certificate chain for TLS")
    serve.add_argument("--tls-key", metavar="FILE", help="PEM private key for TLS")
    serve.add_argument("--max-sessions", type=int, help="most concurrent sessions (default 64)")
    serve.add_argument(
        "--shutdown-grace-s",
        type=float,
        metavar="SECONDS",
        help="how long sessions get to move away on shutdown (default 10)",
    )
    serve.add_argument("--log-level", choices=LOG_LEVELS, help="log level (default info)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="omni-grpc",
        description="Self-hosted full-duplex speech serving: serve the "
        "service, talk to it with a file, or benchmark it.",
    )
    parser.add_argument("--version", action="version", version=omni_grpc.__version__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(commands)
    add_talk_parser(commands)
    bench = commands.add_parser(
        "bench",
        help="run the benchmark (scripts/bench_grpc.py of a source checkout)",
        description="Runs scripts/bench_grpc.py with the arguments that follow, e.g. "
        "`omni-grpc bench --quick`.",
        add_help=False,
    )
    bench.set_defaults(handler=_run_bench)
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


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


if __name__ == "__main__":
    sys.exit(main())
