"""The flags of every subcommand of ``omni-grpc``, and the handler each runs.

How ``serve`` and ``bridge`` merge their settings is :mod:`omni_cli.config`, what each
subcommand runs :mod:`omni_cli.run` (then :mod:`omni_cli.launch`, and the benchmark
:mod:`omni_grpc.bench.service`).
"""

from __future__ import annotations

import argparse
from typing import Any

import omni_grpc
from omni_cli.config import BRIDGE_DEFAULTS, DEFAULT_HTTP_PORT, MIB, default_engine
from omni_cli.logs import LOG_FORMATS
from omni_cli.recordings import add_record_flags, add_recordings_parser, add_replay_parser
from omni_cli.run import (
    run_bench,
    run_bridge,
    run_key_label,
    run_replay,
    run_serve,
    run_talk,
)
from omni_grpc.client.talk_cli import LOG_LEVELS, add_talk_parser
from omni_grpc.core.limits import Limits
from omni_grpc.engine import known_engines
from omni_grpc.wire.keys import LABEL_SECRET_ENV

KEYS_ON_COMMAND_LINE = (
    "Keys on a command line are visible to other users: prefer OMNI_GRPC_API_KEYS (comma-separated)"
)


# The bridge keeps no state between connections, so any of its processes may take any one.
WORKERS_HELP = (
    "processes serving the websocket port, which the kernel spreads connections between "
    "(SO_REUSEPORT): one Python process uses one core"
)


def _add_log_format(parser: Any, default: str | None) -> None:
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=default,
        help="text lines, or one JSON object per line with the session id as a field "
        "(default text)",
    )


def _add_webrtc(parser: Any) -> None:
    """What ICE offers on WebRTC calls (docs/deploy.md): serve and bridge."""
    parser.add_argument(
        "--webrtc-address",
        action="append",
        metavar="ADDRESS",
        help="an address of this machine that WebRTC calls offer besides its interfaces' "
        "(e.g. a LAN address); repeatable. Default: 127.0.0.1 when the bridge listens on "
        "loopback",
    )
    parser.add_argument(
        "--ice-server",
        action="append",
        metavar="URL",
        help="a STUN or TURN server for WebRTC calls behind NAT: stun:host:port or "
        "turn:user:secret@host:port; repeatable (the first of each kind is used)",
    )


def _add_page_policy(parser: Any) -> None:
    """Which web pages (Origin) and host names (Host) the bridge answers: serve and bridge."""
    parser.add_argument(
        "--allowed-origin",
        action="append",
        metavar="ORIGIN",
        help="a web origin whose pages may use the bridge, e.g. https://app.example or "
        "http://localhost:* (any port); repeatable; '*' allows every page. Default: "
        "localhost, 127.0.0.1 and [::1] on any port (the bridge's own origin always)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="a Host name the bridge answers to besides localhost and IP addresses (against "
        "DNS rebinding); repeatable; '*' turns the check off",
    )


def _add_otlp_endpoint(parser: Any) -> None:
    parser.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="send one trace per turn to this OTLP/gRPC collector, e.g. http://127.0.0.1:4317 "
        "(also OTEL_EXPORTER_OTLP_ENDPOINT and the other OTEL_* variables; default: no tracing)",
    )


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the gRPC service (and the websocket bridge)",
        description="Runs the service until SIGTERM or SIGINT, then drains: sessions are told "
        "to go, and the server stops once they have or the grace period ends. Every flag "
        "also reads from OMNI_GRPC_<NAME> (e.g. OMNI_GRPC_GRPC_PORT) and from --config.",
    )
    serve.set_defaults(handler=run_serve)
    serve.add_argument(
        "--config",
        metavar="FILE",
        help="TOML settings file (keys as the flags, "
        "with underscores; [limits] table for server limits)",
    )
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--grpc-port", type=int, help="gRPC port (default 50051; 0 picks one)")
    serve.add_argument(
        "--http-port",
        type=int,
        help=f"websocket bridge port (default {DEFAULT_HTTP_PORT}; 0 turns the bridge off)",
    )
    serve.add_argument(
        "--bridge-workers",
        type=int,
        metavar="N",
        help=WORKERS_HELP + " (default 1: the service's own process, which reaches the "
        "sessions in-process; the others reach them over gRPC)",
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
        help=f"require this bearer key; repeatable. {KEYS_ON_COMMAND_LINE} or the config file",
    )
    serve.add_argument("--tls-cert", metavar="FILE", help="PEM certificate chain for TLS")
    serve.add_argument("--tls-key", metavar="FILE", help="PEM private key for TLS")
    serve.add_argument(
        "--open-health",
        action=argparse.BooleanOptionalAction,
        help="answer gRPC health checks without an API key, for load balancer and Kubernetes "
        "probes (default on)",
    )
    serve.add_argument(
        "--open-reflection",
        action=argparse.BooleanOptionalAction,
        help="answer gRPC reflection without an API key; it describes the whole service "
        "(default off)",
    )
    serve.add_argument("--max-sessions", type=int, help="most concurrent sessions (default 64)")
    serve.add_argument(
        "--memory-budget-mib",
        type=int,
        metavar="MIB",
        help="input audio and queued output all sessions may hold together; each session's "
        "input cap is at most its share (default 1024: 64 sessions x 16 MiB)",
    )
    serve.add_argument(
        "--shutdown-grace-s",
        type=float,
        metavar="SECONDS",
        help="how long sessions get to move away on shutdown (default 10)",
    )
    serve.add_argument(
        "--handshake-timeout-s",
        type=float,
        metavar="SECONDS",
        help="close connections to either port that have not sent their request headers "
        "(HTTP) or finished their TLS and HTTP/2 set-up (gRPC) by then (default 10)",
    )
    serve.add_argument(
        "--max-connection-idle-s",
        type=float,
        metavar="SECONDS",
        help="close gRPC connections that carry no call for this long (default 300)",
    )
    serve.add_argument(
        "--send-deadline-s",
        type=float,
        metavar="SECONDS",
        help="close a websocket with 1013 slow_consumer when one frame has waited this long "
        "for the client to read (default 10); the session stays resumable",
    )
    serve.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus /metrics on this port of its own (0 picks one); they are also "
        "on the bridge's HTTP port when it runs (default: no port of its own)",
    )
    _add_otlp_endpoint(serve)
    serve.add_argument("--log-level", choices=LOG_LEVELS, help="log level (default info)")
    _add_log_format(serve, None)  # None: the file or the environment may set it
    _add_page_policy(serve)
    _add_webrtc(serve)
    _add_rate_limits(serve)
    _add_queue(serve)
    _add_tenants(serve)
    _add_client_secrets(serve)
    _add_durability(serve)
    add_record_flags(serve)


def _add_queue(serve: Any) -> None:
    queue = serve.add_argument_group(
        "admission at capacity",
        "past --capacity sessions, new ones wait in a queue with their stream open, told their "
        "place and an estimated wait, instead of being refused (docs/protocol.md); without "
        "--capacity a session past --max-sessions is refused resource_exhausted",
    )
    queue.add_argument(
        "--capacity",
        metavar="N|auto",
        help="sessions served at once: auto (what the engine says it carries) or N (at most "
        "that; never more than --max-sessions)",
    )
    queue.add_argument(
        "--queue-max-length",
        type=int,
        metavar="N",
        help="sessions waiting at most; one more is refused queue_full (default 256)",
    )
    queue.add_argument(
        "--queue-max-wait-s",
        type=float,
        metavar="SECONDS",
        help="the longest wait; then refused queue_wait_exceeded (default 120)",
    )
    queue.add_argument(
        "--queue-max-overtakes",
        type=int,
        metavar="K",
        help="a class's first session passed over K times goes next: none waits past K + "
        "classes - 1 admissions at the head of its class (default 4)",
    )
    queue.add_argument(
        "--priority-class",
        action="append",
        metavar="NAME=KEY[,KEY]",
        help="a priority class and its API keys, repeatable, highest first; other keys are in "
        "'default', last unless named. Keys on a command line are visible to other users: "
        "prefer OMNI_GRPC_PRIORITY_CLASSES (NAME=KEY,KEY;NAME=KEY) or the config file",
    )


def _add_tenants(serve: Any) -> None:
    tenants = serve.add_argument_group(
        "tenants",
        "what one API key, one address, or a caller without a key may hold, so that none takes "
        "the service from the others (docs/security.md)",
    )
    tenants.add_argument(
        "--trusted-proxy",
        action="append",
        metavar="ADDRESS",
        help="a proxy (an address or a network, e.g. 10.0.0.5 or 10.0.0.0/24) whose "
        "x-forwarded-for names the client a call came from, for the per-address bound; "
        "repeatable (default: none, every call counts against its own peer)",
    )
    limits = Limits()
    for flag, kind, metavar, what in (
        ("--max-concurrent-streams", int, "N", "streams of every kind at once (default 1024)"),
        (
            "--max-streams-per-key",
            int,
            "N",
            "streams and calls one API key may hold (default: half the streams with two keys "
            "or more, else no bound of its own)",
        ),
        (
            "--max-streams-per-peer",
            int,
            "N",
            "gRPC calls and streams one address may hold (default: three quarters of the streams)",
        ),
        (
            "--max-concurrent-rpcs",
            int,
            "N",
            "gRPC's own bound on calls in flight (default: four times the streams)",
        ),
        (
            "--keyless-calls",
            int,
            "N",
            "health checks (and open reflection) without a key at once (default 16)",
        ),
        (
            "--keyless-call-s",
            float,
            "SECONDS",
            "how long such a call may last; a watch then ends and may watch again (default 30)",
        ),
        (
            "--max-sessions-per-key",
            int,
            "N",
            "live sessions one API key may hold (default: three quarters of --max-sessions "
            "with two keys or more, else no bound of its own)",
        ),
        (
            "--key-memory-share",
            float,
            "SHARE",
            "the share of --memory-budget-mib one API key may hold with two keys or more "
            f"(default {limits.key_memory_share:g})",
        ),
        (
            "--key-opens-per-s",
            float,
            "N",
            f"sessions one API key may open a second (default {limits.key_opens_per_s:g})",
        ),
        (
            "--key-resumes-per-s",
            float,
            "N",
            f"resumes one API key may make a second (default {limits.key_resumes_per_s:g})",
        ),
    ):
        tenants.add_argument(flag, type=kind, metavar=metavar, help=what)


def _add_client_secrets(parser: Any, defaults: bool = False) -> None:
    """What one key may mint at the bridge: serve and bridge."""
    parser.add_argument(
        "--max-client-secrets-per-key",
        type=int,
        metavar="N",
        default=BRIDGE_DEFAULTS.max_client_secrets_per_key if defaults else None,
        help="client secrets of one API key that may wait to be used at once "
        f"(default {BRIDGE_DEFAULTS.max_client_secrets_per_key})",
    )
    parser.add_argument(
        "--key-mints-per-s",
        type=float,
        metavar="N",
        default=BRIDGE_DEFAULTS.key_mints_per_s if defaults else None,
        help="client secrets one API key may mint a second "
        f"(default {BRIDGE_DEFAULTS.key_mints_per_s:g})",
    )


def _add_durability(serve: Any) -> None:
    cluster = serve.add_argument_group(
        "beyond one process", "replicas behind a proxy, sessions in Redis (docs/deploy.md)"
    )
    cluster.add_argument(
        "--route",
        metavar="KEY",
        help="this replica's routing key, sent to clients as x-omni-route metadata for the "
        "proxy to bring their resumes back (default: none; with durability, host:port)",
    )
    cluster.add_argument(
        "--durability",
        choices=("off", "async", "sync"),
        help="write sessions to Redis behind each event (async) or before it goes out (sync), "
        "so a peer adopts them when this replica dies or drains (default off)",
    )
    cluster.add_argument(
        "--redis-url",
        metavar="URL",
        help="Redis for --durability (default redis://127.0.0.1:6379/0)",
    )
    cluster.add_argument(
        "--agent-port",
        type=int,
        metavar="PORT",
        help="answer HAProxy's agent check on this port with this replica's free room, as a "
        "weight, so the proxy sends new sessions where there is room (default: off)",
    )


def _add_rate_limits(serve: Any) -> None:
    rates = serve.add_argument_group(
        "rate limits",
        "token buckets per session and per API key; past them a command is refused with a "
        "retryable rate_limit_exceeded error and its retry_after (docs/security.md)",
    )
    limits = Limits()
    for name, unit, what in (
        ("session_commands_per_s", "N", "commands a second per session"),
        ("session_audio_bytes_per_s", "BYTES", "input audio bytes a second per session"),
        ("key_commands_per_s", "N", "commands a second per API key"),
        ("key_audio_bytes_per_s", "BYTES", "input audio bytes a second per API key"),
        ("rate_burst_s", "SECONDS", "seconds of each rate a bucket holds (the burst)"),
    ):
        rates.add_argument(
            "--" + name.replace("_", "-"),
            type=float,
            metavar=unit,
            help=f"{what} (default {getattr(limits, name):.10g})",
        )


def _add_bridge(commands: Any) -> None:
    bridge = commands.add_parser(
        "bridge",
        help="run the websocket bridge alone, in front of a running service",
        description="Serves the OpenAI Realtime websocket dialect and the browser page, and "
        "relays every session to the gRPC service at --grpc-target, until SIGTERM or SIGINT.",
    )
    bridge.set_defaults(handler=run_bridge)
    bridge.add_argument(
        "--grpc-target", required=True, metavar="HOST:PORT", help="the gRPC service to relay to"
    )
    bridge.add_argument("--host", default="127.0.0.1", help="address to listen on")
    bridge.add_argument(
        "--port", type=int, default=DEFAULT_HTTP_PORT, help="HTTP port (0 picks one)"
    )
    bridge.add_argument(
        "--bridge-workers", type=int, default=1, metavar="N", help=WORKERS_HELP + " (default 1)"
    )
    bridge.add_argument(
        "--no-multiplex",
        action="store_true",
        help="a Converse call per websocket, for a service without ConverseMany (by default the "
        "sessions share a few ConverseMany calls, their messages sent in batches)",
    )
    bridge.add_argument(
        "--api-key",
        action="append",
        metavar="KEY",
        help=f"require this key of websocket clients; repeatable. {KEYS_ON_COMMAND_LINE}",
    )
    bridge.add_argument(
        "--service-key",
        metavar="KEY",
        help="present this key to the service (also OMNI_GRPC_SERVICE_KEY); "
        "by default each client's own key is passed on",
    )
    bridge.add_argument("--tls-cert", metavar="FILE", help="PEM certificate chain: serve wss://")
    bridge.add_argument("--tls-key", metavar="FILE", help="PEM private key for --tls-cert")
    bridge.add_argument(
        "--grpc-root-cert",
        metavar="FILE",
        help="reach the service over TLS, trusting this PEM CA (with --tls-cert and without "
        "this flag, the bridge's own certificate is trusted)",
    )
    bridge.add_argument(
        "--grpc-plaintext",
        action="store_true",
        help="reach the service without TLS even when serving wss://",
    )
    bridge.add_argument(
        "--log-level", choices=LOG_LEVELS, default="info", help="log level (default info)"
    )
    _add_log_format(bridge, "text")
    bridge.add_argument(
        "--handshake-timeout-s",
        type=float,
        default=BRIDGE_DEFAULTS.header_timeout_s,
        metavar="SECONDS",
        help="close connections that have not sent their request headers by then "
        f"(default {BRIDGE_DEFAULTS.header_timeout_s:g})",
    )
    bridge.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus /metrics on this port of its own (0 picks one); they are also "
        "on the bridge's HTTP port (default: no port of its own)",
    )
    _add_otlp_endpoint(bridge)
    bridge.add_argument(
        "--send-deadline-s",
        type=float,
        default=BRIDGE_DEFAULTS.send_deadline_s,
        metavar="SECONDS",
        help="close a websocket with 1013 slow_consumer when one frame has waited this long "
        f"for the client to read (default {BRIDGE_DEFAULTS.send_deadline_s:g}); the session "
        "stays resumable",
    )
    bridge.add_argument(
        "--memory-budget-mib",
        type=int,
        default=BRIDGE_DEFAULTS.memory_budget_bytes // MIB,
        metavar="MIB",
        help="what client frames in flight may cost at once, counted from their length "
        "before they are parsed; a frame that does not fit waits unread "
        f"(default {BRIDGE_DEFAULTS.memory_budget_bytes // MIB})",
    )
    bridge.add_argument(
        "--key-memory-share",
        type=float,
        default=BRIDGE_DEFAULTS.key_memory_share,
        metavar="SHARE",
        help="the share of that budget one API key's frames may take, with two keys or more "
        f"(default {BRIDGE_DEFAULTS.key_memory_share:g})",
    )
    _add_client_secrets(bridge, defaults=True)
    _add_page_policy(bridge)
    _add_webrtc(bridge)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="omni-grpc",
        description="Self-hosted full-duplex speech serving: serve the service, run the "
        "websocket bridge alone, talk to the service with a file, or benchmark it.",
    )
    parser.add_argument("--version", action="version", version=omni_grpc.__version__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(commands)
    _add_bridge(commands)
    talk = add_talk_parser(commands)
    talk.set_defaults(handler=run_talk)
    _add_log_format(talk, "text")
    add_replay_parser(commands).set_defaults(handler=run_replay)
    add_recordings_parser(commands)
    commands.add_parser(
        "key-label",
        help="print the label the metrics count an API key under (the key on standard input)",
        description=f"Reads an API key from standard input and prints its label in the "
        f"metrics (omni_grpc_key_refusals and the others), keyed with {LABEL_SECRET_ENV} as "
        "the service and bridges are.",
    ).set_defaults(handler=run_key_label)
    bench = commands.add_parser(
        "bench",
        help="benchmark the gRPC service against a raw grpc.aio echo",
        description="Runs the gRPC benchmark with the arguments that follow, e.g. "
        "`omni-grpc bench --quick`.",
        add_help=False,
    )
    bench.set_defaults(handler=run_bench)
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


__all__ = ["build_parser"]
