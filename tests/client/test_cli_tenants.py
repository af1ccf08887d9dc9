"""The tenant settings of ``omni-grpc serve`` and ``omni-grpc bridge``: defaults, flags,
variables and the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_cli import build_parser
from omni_cli.config import (
    ConfigError,
    ServeSettings,
    resolve_bridge_settings,
    resolve_serve_settings,
)
from omni_grpc.wire.tenant_policy import CLIENT_SECRETS, MINTS_PER_S


def serve(*flags: str, env: dict[str, str] | None = None) -> ServeSettings:
    return resolve_serve_settings(build_parser().parse_args(["serve", *flags]), env or {})


def test_the_defaults_share_between_two_keys_and_bound_calls_without_a_key() -> None:
    settings = serve("--api-key", "a", "--api-key", "b")
    server = settings.server
    assert (server.max_concurrent_streams, server.tenant_policy().streams) == (1024, 512)
    assert server.peer_share() == 768
    assert server.rpc_limit() == 4096
    assert (server.keyless_calls, server.keyless_call_s) == (16, 30.0)
    assert server.limits.max_sessions_per_key == 0  # derived: 48 of 64
    assert settings.bridge.max_client_secrets_per_key == CLIENT_SECRETS
    one_key = serve("--api-key", "a").server
    assert (one_key.tenant_policy().streams, one_key.peer_share()) == (0, 768)  # one tenant


def test_tenant_settings_layer_file_then_env_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text(
        "max_streams_per_key = 10\nkeyless_calls = 4\nkey_mints_per_s = 2\n"
        "[limits]\nmax_sessions_per_key = 3\nkey_opens_per_s = 7\n"
    )
    env = {"OMNI_GRPC_KEYLESS_CALLS": "5", "OMNI_GRPC_KEY_MEMORY_SHARE": "0.25"}
    settings = serve(
        "--config", str(config), "--max-streams-per-peer", "20", "--key-resumes-per-s", "9", env=env
    )
    server = settings.server
    assert (server.max_streams_per_key, server.max_streams_per_peer) == (10, 20)
    assert server.keyless_calls == 5  # the variable over the file
    limits = server.limits
    assert (limits.max_sessions_per_key, limits.key_opens_per_s) == (3, 7.0)
    assert (limits.key_resumes_per_s, limits.key_memory_share) == (9.0, 0.25)
    assert settings.bridge.key_mints_per_s == 2.0


@pytest.mark.parametrize(
    "flags", [["--keyless-calls", "0"], ["--key-mints-per-s", "0"], ["--max-sessions-per-key", "0"]]
)
def test_a_bound_of_nothing_is_refused(flags: list[str]) -> None:
    with pytest.raises(ConfigError):
        serve(*flags)


def test_the_bridge_alone_has_a_frame_budget_and_secrets_of_its_own() -> None:
    args = build_parser().parse_args(["bridge", "--grpc-target", "127.0.0.1:1"])
    options = resolve_bridge_settings(args, {}).bridge
    assert (options.memory_budget_bytes, options.key_memory_share) == (1024 * 1024 * 1024, 0.5)
    assert (options.max_client_secrets_per_key, options.key_mints_per_s) == (
        CLIENT_SECRETS,
        MINTS_PER_S,
    )
    flags = ["--memory-budget-mib", "64", "--key-memory-share", "0.3"]
    flags += ["--max-client-secrets-per-key", "5"]
    args = build_parser().parse_args(["bridge", "--grpc-target", "127.0.0.1:1", *flags])
    options = resolve_bridge_settings(args, {}).bridge
    assert (options.memory_budget_bytes, options.key_memory_share) == (64 * 1024 * 1024, 0.3)
    assert options.max_client_secrets_per_key == 5


def test_trusted_proxies_come_from_flags_variables_and_the_file(tmp_path: Path) -> None:
    assert serve().server.trusted_proxies == ()
    flags = serve("--trusted-proxy", "10.0.0.5", "--trusted-proxy", "10.1.0.0/16").server
    assert flags.trusted_proxies == ("10.0.0.5", "10.1.0.0/16")
    env = serve(env={"OMNI_GRPC_TRUSTED_PROXIES": "127.0.0.1,::1"}).server
    assert env.trusted_proxies == ("127.0.0.1", "::1")
    config = tmp_path / "serve.toml"
    config.write_text('trusted_proxies = ["192.0.2.1"]\n')
    assert serve("--config", str(config)).server.trusted_proxies == ("192.0.2.1",)
    with pytest.raises(ConfigError, match="not an address or network"):
        serve("--trusted-proxy", "proxy.example")
