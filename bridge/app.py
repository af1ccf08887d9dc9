"""The aiohttp application: ``GET /v1/realtime`` (and ``/v1/duplex``) in front of the service.

Stock clients connect as they would to OpenAI: the Python SDK with ``Authorization: Bearer
<key>`` and ``?model=``, browsers with the subprotocols ``realtime`` and
``openai-insecure-api-key.<key>`` (``realtime`` is echoed, or Chrome drops the socket). Before
the upgrade :mod:`bridge.gate` checks the Host, the Origin and, with keys configured, the key
(403 or 401), so that web pages the user visits cannot use a local bridge. With keys, a backend
mints short-lived client secrets for its pages at ``POST /v1/realtime/client_secrets``
(:mod:`bridge.minting`, :mod:`bridge.client_secrets`).
The key a client presented travels on to the service as ``authorization`` metadata, so a
bridge in front of a keyed service needs no keys of its own; a bridge given a ``service_key``
presents that one instead. Every setting is a field of :class:`bridge.options.BridgeOptions`.

All websockets share one gRPC channel (one HTTP/2 connection, multiplexed), with the client
package's channel options, created when the application starts and closed when it stops; a
bridge in the service's own process is handed the service's in-process entry point instead
(``local``, see :mod:`bridge.transport`) and makes no gRPC calls at all;
stopping also closes every websocket with 1001, so clients resume their sessions through
another bridge. :func:`start_bridge` is the entry point (``omni-grpc serve`` and
``omni-grpc bridge`` call it); each websocket is carried by a :class:`bridge.relay.Relay`.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from aiohttp import WSCloseCode, web
from opentelemetry.trace import Tracer, TracerProvider

from bridge.client_secrets import ClientSecrets
from bridge.client_socket import ClientSocket
from bridge.dialects import VLLM_OMNI_PATH, dialect_name, make_dialect, secret_session_config
from bridge.forwarded import forwarded_for
from bridge.frame_budget import FrameBudget, own_budget
from bridge.frame_meter import MeteredSocket
from bridge.gate import Gate, add_security_headers, host_middleware
from bridge.loop_shares import LoopShares
from bridge.metrics import CONNECTIONS, REFUSALS, metrics_handler, usage_handler
from bridge.minting import minting_handler
from bridge.options import MAX_EVENT_BYTES, BridgeOptions
from bridge.relay import Relay
from bridge.resume_secrets import ResumeSecrets
from bridge.tracing import bridge_tracer
from bridge.transport import ServiceLink
from bridge.webrtc.calls import Calls
from omni_grpc.client.channel import ChannelSettings, Connection
from omni_grpc.client.multiplex import MultiplexedConnection
from omni_grpc.wire.keys import bearer_metadata, key_label

STATIC_DIR = Path(__file__).parent / "static"
# The largest inbound event and room for its envelope, on the websocket and on the channel.
MAX_MESSAGE_BYTES = MAX_EVENT_BYTES + 1024 * 1024
_FALSE = frozenset({"0", "false", "no", "off"})
_TRUE = frozenset({"1", "true", "yes", "on"})


class Bridge:
    """What the application shares between its websockets."""

    def __init__(
        self,
        service_settings: ChannelSettings,
        options: BridgeOptions,
        *,
        tracer: Tracer | None = None,
        local: ServiceLink | None = None,
        frames: FrameBudget | None = None,
        on_drained: Callable[[], None] | None = None,
    ) -> None:
        self.service_settings = service_settings
        self.options = options
        self.local = local  # the service's in-process entry point, when it shares the process
        # What one API key gets here (omni_grpc/wire/tenant_policy.py), from the options.
        self.tenants = options.tenant_policy()
        # What client frames may cost before their commands leave: the service's budget when
        # the launcher hands it over, else one of the bridge's own.
        self.frames = frames or own_budget(
            options.memory_budget_bytes, options.api_keys, self.tenants, on_drained
        )
        # The loop time each key's commands may take in one pass (bridge.loop_shares).
        self.loop_shares = LoopShares(self.tenants.loop_slice_s)
        # What a request must show before it is served.
        self.gate = Gate(
            allowed_origins=options.allowed_origins,
            allowed_hosts=options.allowed_hosts,
            bound_host=options.host,
            api_keys=options.api_keys,
            client_secrets=(ClientSecrets(tenants=self.tenants) if options.api_keys else None),
            resume_secrets=ResumeSecrets(options.api_keys) if options.api_keys else None,
        )
        self.relays: set[Relay] = set()
        self.tracer = tracer  # each turn's span and its context for the service; None: off
        self.service: ServiceLink | None = None  # the channel, while the application runs

    async def connect(self, app: web.Application) -> AsyncIterator[None]:
        """The application's cleanup context: one gRPC channel (or the in-process entry point)
        for its whole life."""
        if self.local is not None:
            self.service = self.local
        elif self.options.multiplex:
            self.service = MultiplexedConnection(self.service_settings)
        else:
            self.service = Connection(self.service_settings)
        try:
            yield
        finally:
            await self.service.close()

    async def shutdown(self, app: web.Application) -> None:
        """Closes every websocket with 1001 so its client resumes elsewhere."""
        await asyncio.gather(
            *(
                relay.close(WSCloseCode.GOING_AWAY, "bridge_shutdown")
                for relay in list(self.relays)
            ),
            return_exceptions=True,
        )


BRIDGE = web.AppKey("bridge", Bridge)
CALLS = web.AppKey("calls", Calls)


async def realtime(request: web.Request) -> web.StreamResponse:
    """The websocket endpoint: Host, Origin and key checked, then one session relayed."""
    bridge = request.app[BRIDGE]
    admitted = bridge.gate.admit(request)
    if isinstance(admitted, web.Response):
        REFUSALS.labels(str(admitted.status)).inc()
        return admitted
    key = admitted.key  # the client's key, or the one its secret stands for
    options = bridge.options
    service_key = options.service_key or key
    ws = MeteredSocket(
        bridge.frames,  # each frame charged from its header, under the key the service sees
        service_key,
        # A key the bridge checked or was given is counted by its hash; a client's own text
        # (a bridge without keys) is not a label.
        key_label(service_key) if options.api_keys or options.service_key else "none",
        MAX_EVENT_BYTES,  # a frame over it is dropped as it comes, and refused in band
        protocols=("realtime",),
        heartbeat=options.heartbeat_s,
        max_msg_size=MAX_MESSAGE_BYTES,
        compress=False,
        decode_text=False,  # JSON is parsed from the bytes: no text copy of every frame
    )
    await ws.prepare(request)
    query = request.query
    resume_only = (
        query.get("autostart", "").lower() in _FALSE or query.get("resume", "").lower() in _TRUE
    )
    resume_only = resume_only or bool(admitted.only_session)
    model = query.get("model", "")
    # The duplex extensions go to a client that asks for them (?extensions=1); a stock OpenAI
    # client, which checks every event against the GA schema, gets that schema only
    # (bridge.realtime.plain). The vLLM-Omni dialect has them always.
    extensions = query.get("extensions", "").lower() in _TRUE
    dialect = make_dialect(
        dialect_name(request.path, query),
        max_audio_delta_bytes=options.max_audio_delta_bytes,
        extensions=extensions,
    )
    # A page admitted with a secret holds no key to come back with: it is given resume secrets.
    secrets = bridge.gate.resume_secrets
    resume_secret = None
    if admitted.by_secret and secrets is not None and extensions:
        resume_secret = functools.partial(_resume_secret, secrets, key)
    assert bridge.service is not None, "the channel opens before the first request"
    relay = Relay(
        ClientSocket(ws, request.transport, options.send_deadline_s),
        bridge.service,
        options,
        metadata=bearer_metadata(service_key) + forwarded_for(request),
        model=model,
        # A secret minted with a session opens it at once, as a URL naming a model does.
        autostart=(bool(model) or admitted.session is not None) and not resume_only,
        dialect=dialect,
        tracer=bridge.tracer,
        meter=ws.meter,
        # Without keys of its own, what a client presents is its own text, not a tenant.
        share=bridge.loop_shares.of(key if options.api_keys else ""),
        resume_secret=resume_secret,
        only_session=admitted.only_session,
        minted=admitted.session,
    )
    bridge.relays.add(relay)
    CONNECTIONS.inc()
    try:
        await relay.run()
    finally:
        CONNECTIONS.dec()
        bridge.relays.discard(relay)
    return ws


def _resume_secret(secrets: ResumeSecrets, key: str, session_id: str) -> str:
    return secrets.issue(key, session_id, time.time())


async def health(request: web.Request) -> web.Response:
    """Says the bridge runs (not that the service behind it does)."""
    return web.json_response({"status": "ok"})


async def index(request: web.Request) -> web.FileResponse:
    """The browser page."""
    return web.FileResponse(STATIC_DIR / "index.html")


def create_app(
    service_settings: ChannelSettings,
    options: BridgeOptions,
    *,
    tracer_provider: TracerProvider | None = None,
    local: ServiceLink | None = None,
    frames: FrameBudget | None = None,
    on_drained: Callable[[], None] | None = None,
) -> web.Application:
    """Builds the bridge application for the service that ``service_settings`` reach; with a
    ``tracer_provider``, each turn is traced and its context goes to the service."""
    bridge = Bridge(
        service_settings,
        options,
        tracer=bridge_tracer(tracer_provider),
        local=local,
        frames=frames,
        on_drained=on_drained,
    )
    app = web.Application(middlewares=[host_middleware(bridge.gate)])
    app[BRIDGE] = bridge
    app.on_response_prepare.append(add_security_headers)
    app.cleanup_ctx.append(bridge.connect)
    app.on_shutdown.append(bridge.shutdown)
    app.router.add_get("/v1/realtime", realtime)
    app.router.add_get(VLLM_OMNI_PATH, realtime)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics_handler(bridge.gate))
    app.router.add_get("/v1/omni/usage", usage_handler(bridge.gate))
    calls = Calls(
        options,
        lambda: bridge.service,
        bridge.relays,
        bridge.loop_shares,
        bridge.gate.admit,
        bridge.gate.origin_allowed,
        bridge.gate.resume_secrets,
    )
    calls.add_routes(app)
    app[CALLS] = calls
    if bridge.gate.client_secrets is not None:
        minting = minting_handler(bridge.gate, bridge.gate.client_secrets, secret_session_config)
        app.router.add_post("/v1/realtime/client_secrets", minting)
    if (STATIC_DIR / "index.html").exists():
        app.router.add_get("/", index)
        app.router.add_static("/static/", STATIC_DIR)
    return app


def _channel_settings(grpc_target: str, root_cert_file: str | None) -> ChannelSettings:
    """The client package's channel, over TLS when a root certificate is given."""
    return ChannelSettings(
        target=grpc_target,
        tls=root_cert_file is not None,
        root_certificates=Path(root_cert_file).read_bytes() if root_cert_file else None,
        max_message_bytes=MAX_MESSAGE_BYTES,
    )


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
    options: BridgeOptions,
    *,
    tracer_provider: TracerProvider | None = None,
    local: ServiceLink | None = None,
    frames: FrameBudget | None = None,
    on_drained: Callable[[], None] | None = None,
) -> tuple[web.AppRunner, int]:
    """Starts the bridge with ``options``; returns its runner (``cleanup()`` stops it) and its
    port.

    With a TLS certificate (``options.tls_cert_file``) the bridge serves ``wss://`` and, unless
    ``grpc_plaintext``, also reaches the service over TLS, trusting ``grpc_root_cert_file`` or
    else the same certificate (the case of a bridge started next to the service, sharing its
    files). ``service_key``, when given, is presented to the service instead of each client's
    key. ``allowed_origins`` and ``allowed_hosts`` are :class:`bridge.gate.Gate`'s. With a
    ``tracer_provider`` each turn is traced (:mod:`bridge.tracing`); without one, nothing is.
    With ``local`` (the service's in-process entry point) the streams go to it, not to
    ``grpc_target``; with ``multiplex`` they share a few ``ConverseMany`` calls to it instead
    of a Converse call each. ``reuse_port`` lets several bridge processes listen on one port
    (``SO_REUSEPORT``: the kernel spreads the connections between them). ``frames`` is the
    budget client frames are charged to (:mod:`bridge.frame_budget`): the service's, from a
    launcher that runs both; without it, one of the bridge's own, which calls ``on_drained``
    when a flood of frames has gone through (the launcher gives memory back then).
    """
    tls_cert = options.tls_cert_file
    root = options.grpc_root_cert_file or (tls_cert if not options.grpc_plaintext else None)
    app = create_app(
        _channel_settings(grpc_target, root),
        options,
        tracer_provider=tracer_provider,
        local=local,
        frames=frames,
        on_drained=on_drained,
    )
    # aiohttp's keep-alive timer runs from the moment a connection is accepted and closes it
    # while no whole request has arrived: it is the header read timeout (half-sent requests
    # are closed) as well as the idle timeout between requests. An upgraded websocket is not
    # idle in its sense, so it is not closed by it.
    runner = web.AppRunner(
        app, handle_signals=False, access_log=None, keepalive_timeout=options.header_timeout_s
    )
    await runner.setup()
    site = web.TCPSite(
        runner,
        options.host,
        options.port,
        ssl_context=_server_ssl(tls_cert, options.tls_key_file),
        reuse_port=options.reuse_port or None,
    )
    await site.start()
    bound = runner.addresses[0][1]
    return runner, int(bound)
