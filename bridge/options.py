"""How a bridge serves: its options, in one frozen value from the command line to each relay.

``omni-grpc serve`` and ``omni-grpc bridge`` build a :class:`BridgeOptions` from their settings
(``omni_cli.config``); :func:`bridge.app.start_bridge` takes it whole, the application keeps it,
and every :class:`bridge.relay.Relay` reads its own part of it. What is not a setting but a
live object (the tracer, the service's in-process entry point) is passed beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.gate import DEFAULT_ALLOWED_ORIGINS
from omni_grpc.wire import tenant_policy
from omni_grpc.wire.pcm import CANONICAL_OUTPUT_RATE_HZ, pcm16_bytes
from omni_grpc.wire.tenant_policy import TenantPolicy

# The largest client event the bridge takes: OpenAI's cap on one client event, the reference's too.
MAX_EVENT_BYTES = 15 * 1024 * 1024
# Raw audio bytes per outbound delta: 2 s of canonical output pcm16 (128 KB of base64 at 24 kHz),
# well under the 1 MiB frame cap of older SDKs.
MAX_AUDIO_DELTA_BYTES = pcm16_bytes(2000, CANONICAL_OUTPUT_RATE_HZ)


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeOptions:
    """Every setting of a bridge; the defaults are those of a bridge for local use."""

    # Where it listens.
    host: str = "127.0.0.1"
    port: int = 8080  # 0 picks a free one
    reuse_port: bool = False  # several processes on one port (SO_REUSEPORT)
    tls_cert_file: str | None = None  # serves wss:// (and, by default, TLS to the service)
    tls_key_file: str | None = None
    # Who may use it (bridge.gate).
    api_keys: tuple[str, ...] = ()  # keys clients must present; empty: no check
    allowed_origins: tuple[str, ...] = DEFAULT_ALLOWED_ORIGINS  # pages that may use it
    allowed_hosts: tuple[str, ...] = ()  # Host names besides localhost and addresses
    # Frames in flight (bridge.frame_budget), for a bridge alone (in the service's process, the
    # service's budget and shares): the bytes they may cost, and one key's share of them.
    memory_budget_bytes: int = 1024 * 1024 * 1024
    key_memory_share: float = tenant_policy.MEMORY_SHARE
    # Client secrets (bridge.client_secrets): how many of a key's may wait, how fast it mints.
    max_client_secrets_per_key: int = tenant_policy.CLIENT_SECRETS
    key_mints_per_s: float = tenant_policy.MINTS_PER_S
    # The service behind it.
    service_key: str = ""  # presented to the service; empty: each client's own key
    grpc_root_cert_file: str | None = None  # trust this CA for a TLS service
    grpc_plaintext: bool = False  # plaintext to the service even when serving wss://
    multiplex: bool = False  # the streams share a few ConverseMany calls; False: a call each
    # Each connection (bridge.relay).
    header_timeout_s: float = 10.0  # a connection that has not sent its request by then goes
    config_timeout_s: float = 10.0  # for the first event, when the URL names no model
    heartbeat_s: float = 30.0  # websocket pings
    send_deadline_s: float = 10.0  # a client that takes no frame for so long goes
    max_audio_delta_bytes: int = MAX_AUDIO_DELTA_BYTES  # raw audio per outbound delta
    # WebRTC calls (bridge.webrtc): addresses ICE offers besides the interfaces' (127.0.0.1 is
    # added when ``host`` is a loopback address), and STUN/TURN servers for NAT.
    webrtc_host_addresses: tuple[str, ...] = ()
    webrtc_ice_servers: tuple[str, ...] = ()

    def tenant_policy(self) -> TenantPolicy:
        """What one API key gets at this bridge (omni_grpc/wire/tenant_policy.py): its share of
        the frames in flight, of the loop, and its client secrets."""
        return TenantPolicy.derive(
            len(self.api_keys),
            memory_budget_bytes=self.memory_budget_bytes,
            memory_share=self.key_memory_share,
            client_secrets=self.max_client_secrets_per_key,
            mints_per_s=self.key_mints_per_s,
        )


__all__ = ["MAX_AUDIO_DELTA_BYTES", "MAX_EVENT_BYTES", "BridgeOptions"]
