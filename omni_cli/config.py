"""The settings of ``omni-grpc serve`` and ``omni-grpc bridge``, merged from their sources.

``serve`` reads its settings from, in rising precedence: the built-in defaults, a TOML file
(``--config`` or ``OMNI_GRPC_CONFIG``), ``OMNI_GRPC_*`` environment variables, and flags. The
TOML keys are the flag names with underscores (``grpc_port = 50051``); ``engine_options`` is a
table and ``api_keys`` a list, and a ``[limits]`` table sets any field of the server limits.
``bridge`` reads flags, and its keys also from the environment (``OMNI_GRPC_API_KEYS``,
``OMNI_GRPC_SERVICE_KEY``), since keys on a command line are visible to other users.

The admission queue (``capacity`` and the ``queue_*`` settings) is off unless ``capacity`` is
set; ``priority_classes`` is a table of class name to keys in the file (highest class first),
``NAME=KEY,KEY`` flags, or ``NAME=KEY,KEY;NAME=KEY`` in ``OMNI_GRPC_PRIORITY_CLASSES``.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from bridge.options import BridgeOptions
from omni_cli.logs import LOG_FORMATS
from omni_cli.tracing import traces_endpoint
from omni_grpc.client.talk_cli import LOG_LEVELS
from omni_grpc.core.limits import Limits
from omni_grpc.engine import known_engines
from omni_grpc.server.client_address import trusted_networks
from omni_grpc.server.durable import MODES as DURABILITY_MODES
from omni_grpc.server.recording.settings import DAY_S, REDACTIONS, RecordSettings
from omni_grpc.server.settings import QueueSettings, ServerSettings

ENV_PREFIX = "OMNI_GRPC_"
# The bridge's defaults are BridgeOptions' own: read from it, never restated here.
BRIDGE_DEFAULTS = BridgeOptions()
DEFAULT_HTTP_PORT = BRIDGE_DEFAULTS.port
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeSettings:
    """What ``serve`` runs: the gRPC service, and the websocket bridge next to it."""

    server: ServerSettings
    http_port: int | None  # the bridge's port (0 picks one); None runs gRPC alone
    log_level: str = "info"
    log_format: str = "text"  # or "json": one object per line
    # The bridge's own options; its address, port, keys, certificate and header timeout are
    # the service's, laid over these when it starts (omni_cli.launch.start_service).
    bridge: BridgeOptions = field(default_factory=BridgeOptions)
    metrics_port: int | None = None  # /metrics on a port of its own (0 picks one); None: off
    otlp_endpoint: str | None = None  # OTLP/gRPC collector for traces; None: tracing off
    bridge_workers: int = 1  # processes serving the bridge's port (SO_REUSEPORT)
    agent_port: int | None = None  # HAProxy's agent check (0 picks one); None: off


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeSettings:
    """What ``bridge`` runs: the websocket bridge alone, in front of a running service."""

    grpc_target: str
    # Everything the bridge itself reads; its streams share a few ConverseMany calls by default.
    bridge: BridgeOptions = field(default_factory=lambda: BridgeOptions(multiplex=True))
    log_level: str = "info"
    log_format: str = "text"  # or "json": one object per line
    metrics_port: int | None = None  # /metrics on a port of its own (0 picks one); None: off
    otlp_endpoint: str | None = None  # OTLP/gRPC collector for traces; None: tracing off
    bridge_workers: int = 1  # processes serving the port (SO_REUSEPORT)


def default_engine() -> str:
    """The engine ``serve`` runs when none is named: the embedded one where it exists."""
    embedded = ServerSettings().engine
    return embedded if embedded in known_engines() else "loopback"


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


def _optional_port(value: Any, name: str) -> int | None:
    return None if value is None else _port(value, name)


def _workers(value: Any) -> int:
    try:
        workers = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"bridge_workers must be a whole number, got {value!r}") from None
    if workers < 1:
        raise ConfigError(f"bridge_workers must be at least 1, got {workers}")
    return workers


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _switch(value: Any, name: str) -> bool:
    """A yes/no setting: a TOML boolean, or true/false (1/0, yes/no, on/off) as text."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")


def _log_level(value: Any) -> str:
    level = str(value).lower()
    if level not in LOG_LEVELS:
        raise ConfigError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    return level


def _log_format(value: Any) -> str:
    log_format = str(value).lower()
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"log_format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    return log_format


MIB = 1024 * 1024  # --memory-budget-mib counts these

# serve setting -> how to read it from an environment variable's text.
_ENV_READERS: dict[str, Callable[[str], Any]] = {
    "host": str,
    "grpc_port": str,
    "http_port": str,
    "engine": str,
    "engine_options": lambda text: _key_values(_split(text), "OMNI_GRPC_ENGINE_OPTIONS"),
    "api_keys": _split,
    "allowed_origins": _split,
    "allowed_hosts": _split,
    "trusted_proxies": _split,
    "webrtc_addresses": _split,
    "ice_servers": _split,
    "tls_cert": str,
    "tls_key": str,
    "open_health": str,
    "open_reflection": str,
    "max_sessions": str,
    "memory_budget_mib": str,
    "shutdown_grace_s": str,
    "handshake_timeout_s": str,
    "max_connection_idle_s": str,
    "send_deadline_s": str,
    "metrics_port": str,
    "otlp_endpoint": str,
    "log_level": str,
    "log_format": str,
    "session_commands_per_s": str,
    "session_audio_bytes_per_s": str,
    "key_commands_per_s": str,
    "key_audio_bytes_per_s": str,
    "rate_burst_s": str,
    "route": str,
    "durability": str,
    "redis_url": str,
    "bridge_workers": str,
    "agent_port": str,
    "capacity": str,
    "queue_max_length": str,
    "queue_max_wait_s": str,
    "queue_max_overtakes": str,
    "priority_classes": lambda text: _classes(
        [part for part in text.split(";") if part.strip()], "OMNI_GRPC_PRIORITY_CLASSES"
    ),
    "record": str,
    "record_dir": str,
    "record_redact": _split,
    "record_max_age_days": str,
    "record_max_mib": str,
    "max_concurrent_streams": str,
    "max_streams_per_key": str,
    "max_streams_per_peer": str,
    "max_concurrent_rpcs": str,
    "keyless_calls": str,
    "keyless_call_s": str,
    "max_sessions_per_key": str,
    "key_memory_share": str,
    "key_opens_per_s": str,
    "key_resumes_per_s": str,
    "max_client_secrets_per_key": str,
    "key_mints_per_s": str,
}
# The settings of the admission queue besides capacity: meaningless without it.
QUEUE_SETTINGS = ("queue_max_length", "queue_max_wait_s", "queue_max_overtakes", "priority_classes")
# The serve settings that are fields of the server limits: flags, variables and top-level
# keys of the file like the others, merged into the limits (besides the [limits] table).
LIMIT_SETTINGS = (
    "session_commands_per_s",
    "session_audio_bytes_per_s",
    "key_commands_per_s",
    "key_audio_bytes_per_s",
    "rate_burst_s",
    "max_sessions_per_key",
    "key_memory_share",
    "key_opens_per_s",
    "key_resumes_per_s",
)


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


# Settings whose flags repeat (``--api-key a --api-key b``) under a singular name.
_LIST_SETTINGS = (
    "engine_options",
    "api_keys",
    "allowed_origins",
    "allowed_hosts",
    "trusted_proxies",
    "webrtc_addresses",
    "ice_servers",
    "priority_classes",
    "record_redact",
)


def _flag_layer(args: argparse.Namespace) -> dict[str, Any]:
    layer = {
        key: getattr(args, key)
        for key in _ENV_READERS
        if key not in _LIST_SETTINGS and getattr(args, key) is not None
    }
    if args.engine_option:
        layer["engine_options"] = _key_values(args.engine_option, "--engine-option")
    if args.api_key:
        layer["api_keys"] = list(args.api_key)
    if args.allowed_origin:
        layer["allowed_origins"] = list(args.allowed_origin)
    if args.allowed_host:
        layer["allowed_hosts"] = list(args.allowed_host)
    if args.trusted_proxy:
        layer["trusted_proxies"] = list(args.trusted_proxy)
    if args.webrtc_address:
        layer["webrtc_addresses"] = list(args.webrtc_address)
    if args.ice_server:
        layer["ice_servers"] = list(args.ice_server)
    if args.priority_class:
        layer["priority_classes"] = _classes(args.priority_class, "--priority-class")
    if args.record_redact:
        layer["record_redact"] = [part for flag in args.record_redact for part in _split(flag)]
    return layer


def _networks(entries: Sequence[str]) -> tuple[str, ...]:
    """``--trusted-proxy`` entries, each checked to be an address or a network."""
    try:
        trusted_networks(map(str, entries))
    except ValueError as bad:
        raise ConfigError(str(bad)) from None
    return tuple(map(str, entries))


def _classes(items: Sequence[str], what: str) -> dict[str, list[str]]:
    """``NAME=KEY,KEY`` items, highest class first, as the file's table has them."""
    return {name: _split(keys) for name, keys in _key_values(items, what).items()}


def _whole(merged: Mapping[str, Any], name: str, default: int, least: int) -> int:
    try:
        value = int(merged.get(name, default))
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a whole number") from None
    if value < least:
        raise ConfigError(f"{name} must be at least {least}")
    return value


def _queue(merged: Mapping[str, Any]) -> QueueSettings | None:
    """The admission queue the settings ask for; None without ``capacity`` (and then no other
    queue setting may be given)."""
    if merged.get("capacity") is None:
        if given := [name for name in QUEUE_SETTINGS if name in merged]:
            raise ConfigError(f"{', '.join(given)} need(s) capacity (--capacity N or auto)")
        return None
    capacity = 0 if str(merged["capacity"]).strip().lower() == "auto" else None
    if capacity is None:
        capacity = _whole(merged, "capacity", 0, 1)
    table = merged.get("priority_classes", {})
    if not isinstance(table, Mapping):
        raise ConfigError("priority_classes must be a table of class name to keys")
    classes = tuple((str(name), tuple(map(str, keys))) for name, keys in table.items())
    owners: dict[str, str] = {}
    for name, keys in classes:
        for key in keys:
            if owners.setdefault(key, name) != name:
                raise ConfigError(f"a key is in two priority classes: {owners[key]} and {name}")
    return QueueSettings(
        capacity=capacity,
        max_length=_whole(merged, "queue_max_length", 256, 0),
        max_wait_s=_seconds(merged, "queue_max_wait_s", 120.0),
        max_overtakes=_whole(merged, "queue_max_overtakes", 4, 1),
        classes=classes,
    )


def _limits(values: Mapping[str, Any], max_sessions: Any, budget_mib: Any = None) -> Limits:
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
        if budget_mib is not None:
            chosen["memory_budget_bytes"] = int(budget_mib) * MIB
        converted: dict[str, Any] = {
            name: (int if known[name] == "int" else float)(value) for name, value in chosen.items()
        }
    except (TypeError, ValueError) as error:
        raise ConfigError(f"bad limit value: {error}") from None
    if any(value <= 0 for value in converted.values()):
        raise ConfigError("every limit must be positive")
    return _fit_input_cap(Limits(**converted), "max_pending_input_bytes" in converted)


def _fit_input_cap(limits: Limits, cap_chosen: bool) -> Limits:
    """Makes every session's input cap fit its share of the memory budget.

    With each of ``max_sessions`` sessions at its cap the input still fits the budget. An
    unchosen cap shrinks to the share; a chosen one that does not fit is an error.
    """
    share = limits.memory_budget_bytes // limits.max_sessions
    if limits.max_pending_input_bytes <= share:
        return limits
    if cap_chosen or not share:
        raise ConfigError(
            f"{limits.max_sessions} sessions x max_pending_input_bytes "
            f"{limits.max_pending_input_bytes} do not fit the memory budget of "
            f"{limits.memory_budget_bytes} bytes: raise --memory-budget-mib or lower the others"
        )
    return replace(limits, max_pending_input_bytes=share)


def _seconds(merged: Mapping[str, Any], name: str, default: float) -> float:
    try:
        seconds = float(merged.get(name, default))
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number of seconds") from None
    if not seconds > 0:
        raise ConfigError(f"{name} must be positive")
    return seconds


def _count(merged: Mapping[str, Any], name: str, default: int) -> int:
    """A whole number setting of at least 1 (0 where the default says "derived")."""
    try:
        value = int(merged.get(name, default))
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a whole number") from None
    if value < (0 if default == 0 else 1):
        raise ConfigError(f"{name} must be at least {'0' if default == 0 else '1'}")
    return value


def _rate(merged: Mapping[str, Any], name: str, default: float) -> float:
    try:
        value = float(merged.get(name, default))
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number") from None
    if not value > 0:
        raise ConfigError(f"{name} must be positive")
    return value


def _share(value: Any) -> float:
    default = BRIDGE_DEFAULTS.key_memory_share
    share = _rate(
        {"key_memory_share": default if value is None else value}, "key_memory_share", default
    )
    if share > 1:
        raise ConfigError("key_memory_share must be at most 1")
    return share


def _durability(value: Any) -> str:
    if str(value) not in DURABILITY_MODES:
        raise ConfigError(f"durability must be one of {', '.join(DURABILITY_MODES)}")
    return str(value)


def _recording(merged: Mapping[str, Any]) -> RecordSettings:
    """The recording settings (``record``, ``record_dir``, ``record_redact``, retention)."""
    redact = [str(what) for what in merged.get("record_redact", ())]
    unknown = sorted(set(redact) - set(REDACTIONS))
    if unknown:
        raise ConfigError(f"record_redact takes {' and '.join(REDACTIONS)}, not {unknown}")
    try:
        days = float(merged.get("record_max_age_days", RecordSettings().max_age_s / DAY_S))
        mib = int(merged.get("record_max_mib", RecordSettings().max_total_bytes // MIB))
        return RecordSettings(
            policy=str(merged.get("record", "off")),
            folder=Path(str(merged.get("record_dir", "recordings"))),
            omit_audio="audio" in redact,
            omit_text="text" in redact,
            max_age_s=days * DAY_S,
            max_total_bytes=mib * MIB,
        )
    except ValueError as error:
        raise ConfigError(str(error)) from None


def resolve_serve_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> ServeSettings:
    """Merges defaults, file, environment and flags into the settings of ``serve``."""
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
        limits.update({k: v for k, v in layer.items() if k in LIMIT_SETTINGS})
        merged.update(
            {
                k: v
                for k, v in layer.items()
                if k not in ("engine_options", "limits", *LIMIT_SETTINGS)
            }
        )
    http_port = _port(merged.get("http_port", DEFAULT_HTTP_PORT), "http_port")
    try:
        grace_s = float(merged.get("shutdown_grace_s", 10.0))
    except ValueError:
        raise ConfigError("shutdown_grace_s must be a number of seconds") from None
    if (merged.get("tls_cert") is None) != (merged.get("tls_key") is None):
        raise ConfigError("TLS needs both a certificate and its key (--tls-cert, --tls-key)")
    server = ServerSettings(
        host=str(merged.get("host", "127.0.0.1")),
        grpc_port=_port(merged.get("grpc_port", 50051), "grpc_port"),
        engine=str(merged.get("engine", default_engine())),
        engine_options=options,
        api_keys=tuple(str(key) for key in merged.get("api_keys", ())),
        tls_cert_file=merged.get("tls_cert"),
        tls_key_file=merged.get("tls_key"),
        open_health=_switch(merged.get("open_health", True), "open_health"),
        open_reflection=_switch(merged.get("open_reflection", False), "open_reflection"),
        limits=_limits(limits, merged.get("max_sessions"), merged.get("memory_budget_mib")),
        shutdown_grace_s=grace_s,
        handshake_timeout_s=_seconds(merged, "handshake_timeout_s", 10.0),
        max_connection_idle_s=_seconds(merged, "max_connection_idle_s", 300.0),
        route=str(merged.get("route", "")),
        durability=_durability(merged.get("durability", "off")),
        redis_url=str(merged.get("redis_url", DEFAULT_REDIS_URL)),
        queue=_queue(merged),
        recording=_recording(merged),
        max_concurrent_streams=_count(merged, "max_concurrent_streams", 1024),
        # 0: derived from the streams and the keys (ServerSettings.tenant_policy, peer_share and
        # rpc_limit).
        max_streams_per_key=_count(merged, "max_streams_per_key", 0),
        max_streams_per_peer=_count(merged, "max_streams_per_peer", 0),
        trusted_proxies=_networks(merged.get("trusted_proxies", ())),
        max_concurrent_rpcs=_count(merged, "max_concurrent_rpcs", 0),
        keyless_calls=_count(merged, "keyless_calls", 16),
        keyless_call_s=_seconds(merged, "keyless_call_s", 30.0),
    )
    return ServeSettings(
        server=server,
        http_port=http_port or None,  # 0 turns the websocket bridge off
        log_level=_log_level(merged.get("log_level", "info")),
        log_format=_log_format(merged.get("log_format", "text")),
        bridge=BridgeOptions(
            allowed_origins=tuple(
                map(str, merged.get("allowed_origins", BRIDGE_DEFAULTS.allowed_origins))
            ),
            allowed_hosts=tuple(map(str, merged.get("allowed_hosts", ()))),
            webrtc_host_addresses=tuple(map(str, merged.get("webrtc_addresses", ()))),
            webrtc_ice_servers=tuple(map(str, merged.get("ice_servers", ()))),
            send_deadline_s=_seconds(merged, "send_deadline_s", BRIDGE_DEFAULTS.send_deadline_s),
            max_client_secrets_per_key=_count(
                merged, "max_client_secrets_per_key", BRIDGE_DEFAULTS.max_client_secrets_per_key
            ),
            key_mints_per_s=_rate(merged, "key_mints_per_s", BRIDGE_DEFAULTS.key_mints_per_s),
        ),
        metrics_port=_optional_port(merged.get("metrics_port"), "metrics_port"),
        otlp_endpoint=traces_endpoint(merged.get("otlp_endpoint"), environ),
        bridge_workers=_workers(merged.get("bridge_workers", 1)),
        agent_port=_optional_port(merged.get("agent_port"), "agent_port"),
    )


def resolve_bridge_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> BridgeSettings:
    """The settings of ``bridge`` from its flags, with keys also from the environment."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigError("TLS needs both a certificate and its key (--tls-cert, --tls-key)")
    if args.grpc_plaintext and args.grpc_root_cert:
        raise ConfigError("--grpc-plaintext and --grpc-root-cert contradict each other")
    api_keys = args.api_key or _split(environ.get(ENV_PREFIX + "API_KEYS", ""))
    bridge = BridgeOptions(
        host=args.host,
        port=_port(args.port, "port"),
        api_keys=tuple(api_keys),
        service_key=args.service_key or environ.get(ENV_PREFIX + "SERVICE_KEY", ""),
        tls_cert_file=args.tls_cert,
        tls_key_file=args.tls_key,
        grpc_root_cert_file=args.grpc_root_cert,
        grpc_plaintext=args.grpc_plaintext,
        allowed_origins=tuple(args.allowed_origin or BRIDGE_DEFAULTS.allowed_origins),
        allowed_hosts=tuple(args.allowed_host or ()),
        webrtc_host_addresses=tuple(args.webrtc_address or ()),
        webrtc_ice_servers=tuple(args.ice_server or ()),
        header_timeout_s=_seconds(
            vars(args), "handshake_timeout_s", BRIDGE_DEFAULTS.header_timeout_s
        ),
        send_deadline_s=_seconds(vars(args), "send_deadline_s", BRIDGE_DEFAULTS.send_deadline_s),
        multiplex=not args.no_multiplex,
        memory_budget_bytes=_count(
            vars(args), "memory_budget_mib", BRIDGE_DEFAULTS.memory_budget_bytes // MIB
        )
        * MIB,
        key_memory_share=_share(vars(args).get("key_memory_share")),
        max_client_secrets_per_key=_count(
            vars(args), "max_client_secrets_per_key", BRIDGE_DEFAULTS.max_client_secrets_per_key
        ),
        key_mints_per_s=_rate(vars(args), "key_mints_per_s", BRIDGE_DEFAULTS.key_mints_per_s),
    )
    return BridgeSettings(
        grpc_target=args.grpc_target,
        bridge=bridge,
        log_level=_log_level(args.log_level),
        log_format=_log_format(args.log_format),
        metrics_port=_optional_port(getattr(args, "metrics_port", None), "metrics_port"),
        otlp_endpoint=traces_endpoint(getattr(args, "otlp_endpoint", None), environ),
        bridge_workers=_workers(args.bridge_workers),
    )
