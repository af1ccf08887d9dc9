"""The aiohttp application: ``GET /v1/realtime`` (and ``/v1/duplex``) in front of the service.

Stock clients connect as they would to OpenAI: the Python SDK with ``Authorization: Bearer
<key>`` and ``?model=``, browsers with the subprotocols ``realtime`` and
``openai-insecure-api-key.<key>`` (``realtime`` is echoed, or Chrome drops the socket). With
keys configured anything else is refused with close code 1008; without keys local use is open.
The key a client presented travels on to the service as ``authorization`` metadata, so a
bridge in front of a keyed service needs no keys of its own; a bridge given a ``service_key``
presents that one instead.

All websockets share one gRPC channel (one HTTP/2 connection, multiplexed), created when the
application starts and closed when it stops; stopping also closes every websocket with 1001,
so clients resume their sessions through another bridge.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import orjson
from aiohttp import WSCloseCode, WSMsgType, web

from bridge.connection import Connection
from bridge.dialect import MAX_EVENT_BYTES, error_json
from bridge.outbound import MAX_AUDIO_DELTA_BYTES
from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.wire.keys import bearer_metadata, key_matches

if TYPE_CHECKING:
    from omni_grpc.gen.omni.duplex.v1.duplex_pb2_grpc import DuplexServiceAsyncStub

logger = logging.getLogger(__name__)

KEY_PROTOCOL_PREFIX = "openai-insecure-api-key."
STATIC_DIR = Path(__file__).parent / "static"
_FALSE = frozenset({"0", "false", "no", "off"})
_TRUE = frozenset({"1", "true", "yes", "on"})


class Bridge:
    """What the application shares between its websockets."""

    def __init__(
        self,
        grpc_target: str,
        *,
        api_keys: tuple[str, ...],
        service_key: str = "",
        grpc_credentials: grpc.ChannelCredentials | None,
        config_timeout_s: float,
        heartbeat_s: float,
        max_audio_delta_bytes: int,
    ) -> None:
        self.grpc_target = grpc_target
        self.api_keys = api_keys
        self.service_key = service_key  # presented to the service instead of the client's key
        self.grpc_credentials = grpc_credentials
        self.config_timeout_s = config_timeout_s
        self.heartbeat_s = heartbeat_s
        self.max_audio_delta_bytes = max_audio_delta_bytes
        self.connections: set[Connection] = set()
        self.stub: DuplexServiceAsyncStub | None = None

    async def channel(self, app: web.Application) -> AsyncIterator[None]:
        """The application's cleanup context: one gRPC channel for its whole life."""
        options = [
            # Inbound events may be 15 MiB; leave room for the envelope.
            ("grpc.max_send_message_length", MAX_EVENT_BYTES + 1024 * 1024),
            ("grpc.max_receive_message_length", 16 * 1024 * 1024),
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_timeout_ms", 10_000),
        ]
        channel = (
            grpc.aio.secure_channel(self.grpc_target, self.grpc_credentials, options)
            if self.grpc_credentials
            else grpc.aio.insecure_channel(self.grpc_target, options)
        )
        self.stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        try:
            yield
        finally:
            await channel.close(None)

    async def shutdown(self, app: web.Application) -> None:
        """Closes every websocket with 1001 so its client resumes elsewhere."""
        await asyncio.gather(
            *(
                conn.close(WSCloseCode.GOING_AWAY, "bridge_shutdown")
                for conn in list(self.connections)
            ),
            return_exceptions=True,
        )


BRIDGE = web.AppKey("bridge", Bridge)


def presented_key(request: web.Request) -> str:
    """The API key of a connection: a bearer header, or the browser subprotocol."""
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header[len("Bearer ") :].strip()
    for protocol in request.headers.get("Sec-WebSocket-Protocol", "").split(","):
        protocol = protocol.strip()
        if protocol.startswith(KEY_PROTOCOL_PREFIX):
            return protocol[len(KEY_PROTOCOL_PREFIX) :]
    return ""


async def realtime(request: web.Request) -> web.WebSocketResponse:
    """The websocket endpoint: authenticate, then carry one session."""
    bridge = request.app[BRIDGE]
    ws = web.WebSocketResponse(
        protocols=("realtime",),
        heartbeat=bridge.heartbeat_s,
        max_msg_size=MAX_EVENT_BYTES + 1024 * 1024,
        compress=False,
    )
    await ws.prepare(request)
    key = presented_key(request)
    if bridge.api_keys and not key_matches(key, bridge.api_keys):
        await ws.send_frame(
            orjson.dumps(error_json("invalid_api_key", "a valid API key is required")),
            WSMsgType.TEXT,
        )
        await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"invalid_api_key")
        return ws
    query = request.query
    resume_only = (
        query.get("autostart", "").lower() in _FALSE or query.get("resume", "").lower() in _TRUE
    )
    model = query.get("model", "")
    assert bridge.stub is not None, "the channel opens before the first request"
    conn = Connection(
        ws,
        bridge.stub,
        metadata=bearer_metadata(bridge.service_key or key),
        model=model,
        autostart=bool(model) and not resume_only,
        config_timeout_s=bridge.config_timeout_s,
        max_audio_delta_bytes=bridge.max_audio_delta_bytes,
    )
    bridge.connections.add(conn)
    try:
        await conn.run()
    finally:
        bridge.connections.discard(conn)
    return ws


async def health(request: web.Request) -> web.Response:
    """Says the bridge runs (not that the service behind it does)."""
    return web.json_response({"status": "ok"})


async def index(request: web.Request) -> web.FileResponse:
    """The browser page."""
    return web.FileResponse(STATIC_DIR / "index.html")


def create_app(
    grpc_target: str,
    *,
    api_keys: tuple[str, ...] = (),
    service_key: str = "",
    grpc_credentials: grpc.ChannelCredentials | None = None,
    config_timeout_s: float = 10.0,
    heartbeat_s: float = 30.0,
    max_audio_delta_bytes: int = MAX_AUDIO_DELTA_BYTES,
) -> web.Application:
    """Builds the bridge application for the service at ``grpc_target``."""
    bridge = Bridge(
        grpc_target,
        api_keys=tuple(api_keys),
        service_key=service_key,
        grpc_credentials=grpc_credentials,
        config_timeout_s=config_timeout_s,
        heartbeat_s=heartbeat_s,
        max_audio_delta_bytes=max_audio_delta_bytes,
    )
    app = web.Application()
    app[BRIDGE] = bridge
    app.cleanup_ctx.append(bridge.channel)
    app.on_shutdown.append(bridge.shutdown)
    app.router.add_get("/v1/realtime", realtime)
    app.router.add_get("/v1/duplex", realtime)
    app.router.add_get("/health", health)
    if (STATIC_DIR / "index.html").exists():
        app.router.add_get("/", index)
        app.router.add_static("/static/", STATIC_DIR)
    return app


def _channel_credentials(root_cert_file: str) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(Path(root_cert_file).read_bytes())


def _server_ssl(cert_file: str | None, key_file: str | None) -> ssl.SSLContext | None:
    if not cert_file:
        return None
    if not key_file:
        raise ValueError("a TLS certificate needs its key file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context


async def start_bridge(
    grpc_target: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    api_keys: tuple[str, ...] = (),
    service_key: str = "",
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    grpc_root_cert_file: str | None = None,
    grpc_plaintext: bool = False,
    config_timeout_s: float = 10.0,
    heartbeat_s: float = 30.0,
    max_audio_delta_bytes: int = MAX_AUDIO_DELTA_BYTES,
) -> tuple[web.AppRunner, int]:
    """Starts the bridge; returns its runner (``cleanup()`` stops it) and its port.

    With a TLS certificate the bridge serves ``wss://`` and, unless ``grpc_plaintext``, also
    reaches the service over TLS, trusting ``grpc_root_cert_file`` or else the same
    certificate (the case of a bridge started next to the service, sharing its files).
    """
    root = grpc_root_cert_file or (tls_cert_file if not grpc_plaintext else None)
    credentials = _channel_credentials(root) if root else None
    app = create_app(
        grpc_target,
        api_keys=api_keys,
        service_key=service_key,
        grpc_credentials=credentials,
        config_timeout_s=config_timeout_s,
        heartbeat_s=heartbeat_s,
        max_audio_delta_bytes=max_audio_delta_bytes,
    )
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=_server_ssl(tls_cert_file, tls_key_file))
    await site.start()
    bound = runner.addresses[0][1]
    return runner, int(bound)


async def run_bridge(
    grpc_target: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    api_keys: tuple[str, ...] = (),
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    grpc_root_cert_file: str | None = None,
    grpc_plaintext: bool = False,
) -> None:
    """Runs a standalone bridge until cancelled (``omni-grpc bridge --grpc-target``)."""
    runner, bound = await start_bridge(
        grpc_target,
        host=host,
        port=port,
        api_keys=api_keys,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
        grpc_root_cert_file=grpc_root_cert_file,
        grpc_plaintext=grpc_plaintext,
    )
    scheme = "https" if tls_cert_file else "http"
    logger.info("websocket bridge on %s://%s:%d/ for %s", scheme, host, bound, grpc_target)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
