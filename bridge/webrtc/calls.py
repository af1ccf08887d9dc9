"""OpenAI's WebRTC call flow on the bridge: ``POST /v1/realtime/calls`` and its hang-up.

A caller posts its SDP offer (``Content-Type: application/sdp``; or, as a server starting a
call for a browser does, a multipart form with ``sdp`` and a ``session`` JSON) with its key or
a client secret as the bearer, and gets ``201`` with the SDP answer and the call's id in
``Location``. The rules the flow holds:

* **The websocket's checks, the websocket's refusals.** Host, Origin and key go through the
  same :class:`bridge.gate.Gate`; the session opens (or resumes) *before* the answer, so a
  refusal of the service (a full queue, a bad key, an unknown session) is an HTTP error whose
  body is the dialect's ``error`` object, and no peer connection is left behind: a refused
  call's is closed before the answer goes. A session placed in the admission queue is answered
  at once; it waits, as a stock websocket client's does, and is admitted later.
* **One relay, another carrier.** The call's events go through a :class:`bridge.relay.Relay`
  over a :class:`bridge.webrtc.carrier.CallCarrier`: the same dialect, numbering, rate limits
  and ends as a websocket.
* **A call that survives the network** (an extension): an offer with the headers
  ``Omni-Session-Id`` and ``Omni-Resume-Token`` (and ``Omni-Last-Event-Seq``, the last event it
  had) resumes that session on a new peer connection, as ``session.resume`` does on a
  websocket: the journal after that event is replayed on the new channel, and only audio
  made after the resume is heard on the new track. A caller that knows nothing of it just
  starts a new call.
* **Nothing half-open.** A call whose channel has not opened within the config timeout, or
  whose peer connection failed or closed, ends its relay; the session stays resumable for its
  grace, as a websocket's does when its socket goes. A hang-up (``POST .../{id}/hangup`` or
  ``DELETE .../{id}``) closes the session too, as OpenAI's does.

aiortc is the WebRTC stack (:mod:`bridge.webrtc.ice` for what ICE offers).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from bridge.dialects import make_dialect
from bridge.forwarded import forwarded_for
from bridge.gate import Admitted, unauthorized
from bridge.loop_shares import LoopShares
from bridge.metrics import CONNECTIONS, REFUSALS
from bridge.options import BridgeOptions
from bridge.relay import Relay, RelayState
from bridge.resume_secrets import ResumeSecrets
from bridge.transport import ServiceLink
from bridge.webrtc import jitter
from bridge.webrtc.carrier import CallCarrier
from bridge.webrtc.ice import ice_servers, offer_addresses
from bridge.webrtc.media import hear_caller
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_metadata

logger = logging.getLogger(__name__)

CALLS_PATH = "/v1/realtime/calls"
MAX_OFFER_BYTES = 64 * 1024  # an SDP offer is a few kilobytes; a session JSON no more
SESSION_ID_HEADER = "Omni-Session-Id"
RESUME_TOKEN_HEADER = "Omni-Resume-Token"
LAST_EVENT_HEADER = "Omni-Last-Event-Seq"
_TRUE = frozenset({"1", "true", "yes", "on"})
# The HTTP status of a refusal the service made, by the error's type.
_REFUSAL_STATUS = {"rate_limit_error": 429, "invalid_request_error": 400}


@dataclass(frozen=True, slots=True)
class Offer:
    """What a call request brought: the SDP offer and a first ``session.update``, if any."""

    sdp: str
    session: dict[str, Any] | None = None


def refusal_response(status: int, code: str, message: str, error_type: str) -> web.Response:
    """An HTTP refusal whose body is an OpenAI ``error`` object."""
    body = {"error": {"type": error_type, "code": code, "message": message}}
    return web.json_response(body, status=status)


class Calls:
    """The bridge's WebRTC calls: their routes and the peer connections they hold."""

    def __init__(
        self,
        options: BridgeOptions,
        service: Callable[[], ServiceLink | None],
        relays: set[Relay],
        loop_shares: LoopShares,
        admit: Callable[[web.Request], Admitted | web.Response],
        origin_allowed: Callable[[str | None, str | None], bool],
        resume_secrets: ResumeSecrets | None = None,
    ) -> None:
        self._options = options
        self._service = service  # the channel, once the application runs
        self._relays = relays  # the bridge's, so a shutdown closes calls too
        self._loop_shares = loop_shares
        self._admit = admit
        self._origin_allowed = origin_allowed
        # A caller a secret admitted is handed resume secrets, as a page's websocket is
        # (bridge.resume_secrets): it holds no key to come back with.
        self._resume_secrets = resume_secrets
        jitter.install()  # a lost packet costs 20 ms of audio, not a stalled buffer
        if options.webrtc_host_addresses or _is_loopback(options.host):
            offer_addresses(options.webrtc_host_addresses or ("127.0.0.1",))
        self._configuration = RTCConfiguration(iceServers=ice_servers(options.webrtc_ice_servers))
        self.peers: dict[str, RTCPeerConnection] = {}  # live calls, by call id
        self._carriers: dict[str, CallCarrier] = {}  # their carriers, by call id
        self._tasks: set[asyncio.Task[None]] = set()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(CALLS_PATH, self.create)
        app.router.add_route("OPTIONS", CALLS_PATH, self.preflight)
        app.on_response_prepare.append(self._cross_origin)
        app.router.add_post(CALLS_PATH + "/{call_id}/hangup", self.hang_up)
        app.router.add_delete(CALLS_PATH + "/{call_id}", self.hang_up)
        app.on_shutdown.append(self._shut_down)

    async def _shut_down(self, app: web.Application) -> None:
        for peer in list(self.peers.values()):
            await peer.close()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)

    async def preflight(self, request: web.Request) -> web.Response:
        """A browser's check before a page on another allowed origin posts its offer."""
        origin = request.headers.get("Origin")
        if origin is None or not self._origin_allowed(origin, request.headers.get("Host")):
            return web.Response(status=403)
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Methods": "POST, DELETE",
                "Access-Control-Allow-Headers": request.headers.get(
                    "Access-Control-Request-Headers", ""
                ),
                "Access-Control-Max-Age": "600",
            },
        )

    async def _cross_origin(self, request: web.Request, response: web.StreamResponse) -> None:
        """Lets an allowed page read the answers of the call routes (the gate refused others)."""
        origin = request.headers.get("Origin")
        if (
            origin is not None
            and request.path.startswith(CALLS_PATH)
            and self._origin_allowed(origin, request.headers.get("Host"))
        ):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = "Location"
            response.headers["Vary"] = "Origin"

    async def hang_up(self, request: web.Request) -> web.Response:
        admitted = self._admit(request)
        if isinstance(admitted, web.Response):
            return admitted
        carrier = self._carriers.get(request.match_info["call_id"])
        if carrier is None:
            return refusal_response(404, "call_not_found", "no such call", "invalid_request_error")
        # As OpenAI's hang-up: the call ends with its session (the caller's own close, after
        # what it sent before); the peer connection goes when the service has closed it.
        carrier.as_if_sent({"type": "session.close", "reason": "hang_up"})
        return web.Response(status=200)

    async def create(self, request: web.Request) -> web.Response:
        """Answers an SDP offer with a call, or refuses it with nothing left behind."""
        admitted = self._admit(request)
        if (
            not isinstance(admitted, web.Response)
            and admitted.only_session
            and admitted.only_session != request.headers.get(SESSION_ID_HEADER)
        ):
            admitted = unauthorized()  # a resume secret resumes its own session, nothing else
        if isinstance(admitted, web.Response):
            REFUSALS.labels(str(admitted.status)).inc()
            return _as_error(admitted)
        offer = await _read_offer(request)
        if isinstance(offer, web.Response):
            REFUSALS.labels(str(offer.status)).inc()
            return offer
        service = self._service()
        assert service is not None, "the channel opens before the first request"
        peer = RTCPeerConnection(self._configuration)
        call_id = "rtc_" + secrets.token_hex(12)
        model_named = bool(request.query.get("model") or (offer.session or {}).get("model"))
        carrier = CallCarrier(
            self._options.send_deadline_s,
            lambda: self._end(call_id, peer),
            model_named=model_named or bool(request.headers.get(SESSION_ID_HEADER)),
        )
        self._listen(peer, carrier)
        try:
            await peer.setRemoteDescription(RTCSessionDescription(offer.sdp, "offer"))
        except ValueError as error:
            await peer.close()
            REFUSALS.labels("400").inc()
            return refusal_response(400, "invalid_offer", str(error), "invalid_request_error")
        if not any(t.kind == "audio" for t in peer.getTransceivers()):
            await peer.close()
            REFUSALS.labels("400").inc()
            return refusal_response(
                400, "invalid_offer", "the offer has no audio", "invalid_request_error"
            )
        self._answer_with(peer, carrier)
        relay = self._relay(request, admitted, carrier, offer)
        carrier.when_ended(functools.partial(self._ended_before_attached, relay))
        task = asyncio.create_task(self._run(call_id, relay, peer), name="bridge-call")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.peers[call_id] = peer
        self._carriers[call_id] = carrier
        try:
            await asyncio.wait_for(relay.answered.wait(), self._options.config_timeout_s)
        except TimeoutError:
            await relay.close(1011, "timeout")
        if relay.state is RelayState.CLOSED:
            await peer.close()
            await asyncio.wait({task})
            REFUSALS.labels("503").inc()
            return _refused_call(carrier.refusal)
        await peer.setLocalDescription(await peer.createAnswer())
        description = peer.localDescription
        return web.Response(
            status=201,
            text=description.sdp,
            content_type="application/sdp",
            headers={"Location": f"{CALLS_PATH}/{call_id}"},
        )

    def _listen(self, peer: RTCPeerConnection, carrier: CallCarrier) -> None:
        """Connects the peer connection's channel, caller's track and states to the carrier
        (before the offer is read: reading it announces the caller's track)."""

        @peer.on("datachannel")
        def _channel(channel: Any) -> None:
            if channel.label == "oai-events":
                carrier.attach(channel)

        @peer.on("track")
        def _track(track: Any) -> None:
            if track.kind == "audio":
                task = asyncio.create_task(hear_caller(track, carrier.hand_on), name="call-mic")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

        @peer.on("connectionstatechange")
        async def _state() -> None:
            if peer.connectionState in ("failed", "closed"):
                carrier.ended()

    def _answer_with(self, peer: RTCPeerConnection, carrier: CallCarrier) -> None:
        """Puts the answer's track on the offered audio, and ends a call whose channel does not
        open within the config timeout."""
        for transceiver in peer.getTransceivers():
            if transceiver.kind == "audio":
                peer.addTrack(carrier.track)
                break

        async def _opened_in_time() -> None:
            await asyncio.sleep(self._options.config_timeout_s)
            if not carrier.channel_open:
                logger.info("a call's channel did not open in time; ending it")
                carrier.ended()

        timer = asyncio.create_task(_opened_in_time(), name="call-open-timer")
        self._tasks.add(timer)
        timer.add_done_callback(self._tasks.discard)
        carrier.when_ended(timer.cancel)

    def _relay(
        self, request: web.Request, admitted: Admitted, carrier: CallCarrier, offer: Offer
    ) -> Relay:
        options = self._options
        key = admitted.key
        service_key = options.service_key or key
        query = request.query
        session_id = request.headers.get(SESSION_ID_HEADER, "")
        resume_token = request.headers.get(RESUME_TOKEN_HEADER, "")
        resuming = bool(session_id and resume_token)
        extensions = resuming or query.get("extensions", "").lower() in _TRUE
        if resuming:
            carrier.as_if_sent(
                {
                    "type": "session.resume",
                    "session_id": session_id,
                    "resume_token": resume_token,
                    "last_received_server_event_seq": _seq(request.headers),
                }
            )
        if offer.session is not None:
            carrier.as_if_sent({"type": "session.update", "session": offer.session})
        model = query.get("model", "") or str((offer.session or {}).get("model", ""))
        minted = None
        if admitted.session is not None:
            # A client secret minted with a session opens it; its audio formats are the call's,
            # as a session.update's are (bridge.webrtc.carrier).
            minted = pb.SessionConfig()
            minted.CopyFrom(admitted.session)
            minted.ClearField("input_audio_format")
            minted.ClearField("output_audio_format")
        service = self._service()
        assert service is not None
        return Relay(
            carrier,
            service,
            options,
            metadata=bearer_metadata(service_key) + forwarded_for(request),
            model=model,
            # A new call's session opens at once (a refusal is the HTTP answer); a resume, or
            # a form's session, is the call's first event, unless a minted session opened it
            # (the form's then updates it).
            autostart=not resuming and (offer.session is None or minted is not None),
            dialect=make_dialect(
                "openai", max_audio_delta_bytes=options.max_audio_delta_bytes, extensions=extensions
            ),
            share=self._loop_shares.of(key if options.api_keys else ""),
            resume_secret=(
                functools.partial(_resume_secret, self._resume_secrets, key)
                if admitted.by_secret and self._resume_secrets is not None and extensions
                else None
            ),
            only_session=admitted.only_session,
            minted=minted,
        )

    async def _run(self, call_id: str, relay: Relay, peer: RTCPeerConnection) -> None:
        self._relays.add(relay)
        CONNECTIONS.inc()
        try:
            await relay.run()
        finally:
            CONNECTIONS.dec()
            self._relays.discard(relay)
            await self._close_peer(call_id, peer)

    def _ended_before_attached(self, relay: Relay) -> None:
        """A call gone while its session still waits (in the admission queue, say): the relay
        reads nothing of its carrier before the session is attached, so it is closed here, as
        a websocket's relay ends when it cannot send a waiting socket its place. The session
        is detached, as for any dropped call, and resumable for its grace."""
        if relay.state is RelayState.ATTACHING:
            task = asyncio.create_task(relay.close(1000, "call_ended"), name="call-gone")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _end(self, call_id: str, peer: RTCPeerConnection) -> None:
        """The relay ended the call: its peer connection goes too."""
        task = asyncio.create_task(self._close_peer(call_id, peer), name="call-close")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _close_peer(self, call_id: str, peer: RTCPeerConnection) -> None:
        self._carriers.pop(call_id, None)
        if self.peers.get(call_id) is peer:
            del self.peers[call_id]
        with contextlib.suppress(Exception):  # a closing peer connection may fail its close
            await peer.close()


def _resume_secret(secrets: ResumeSecrets, key: str, session_id: str) -> str:
    return secrets.issue(key, session_id, time.time())


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _seq(headers: Any) -> int:
    try:
        return max(int(headers.get(LAST_EVENT_HEADER, "0")), 0)
    except ValueError:
        return 0


async def _read_offer(request: web.Request) -> Offer | web.Response:
    """The offer of a call request, or its typed refusal."""
    if request.content_length is not None and request.content_length > MAX_OFFER_BYTES:
        return refusal_response(
            413, "offer_too_large", "the offer is too large", "invalid_request_error"
        )
    if request.content_type == "application/sdp":
        body = await request.content.read(MAX_OFFER_BYTES + 1)
        if len(body) > MAX_OFFER_BYTES:
            return refusal_response(
                413, "offer_too_large", "the offer is too large", "invalid_request_error"
            )
        return Offer(body.decode("utf-8", "replace"))
    if request.content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
        form = await request.post()
        sdp, session = form.get("sdp"), form.get("session")
        if not isinstance(sdp, str):
            return refusal_response(
                400, "invalid_offer", "the form has no sdp", "invalid_request_error"
            )
        try:
            parsed = orjson.loads(session) if isinstance(session, str) else None
        except orjson.JSONDecodeError:
            parsed = None
        if session is not None and not isinstance(parsed, dict):
            return refusal_response(
                400, "invalid_json", "the session is not a JSON object", "invalid_request_error"
            )
        return Offer(sdp, parsed)
    return refusal_response(
        415, "unsupported_media_type", "send the offer as application/sdp", "invalid_request_error"
    )


def _as_error(response: web.Response) -> web.Response:
    """The gate's plain refusal (403, 401) as an OpenAI error object, its headers kept."""
    code = (response.text or "").strip() or "refused"
    refused = refusal_response(
        response.status, code, code.replace("_", " "), "invalid_request_error"
    )
    for name in ("WWW-Authenticate",):
        if name in response.headers:
            refused.headers[name] = response.headers[name]
    return refused


def _refused_call(error: dict[str, Any] | None) -> web.Response:
    """The HTTP answer of a call whose session the service refused: the dialect's error."""
    if error is None:
        return refusal_response(
            503, "service_unavailable", "the session ended before it was answered", "server_error"
        )
    found = error.get("error")
    detail: dict[str, Any] = found if isinstance(found, dict) else {}
    status = _REFUSAL_STATUS.get(str(detail.get("type", "")), 503)
    if detail.get("code") == "invalid_api_key":
        status = 401
    return web.json_response({"error": detail}, status=status)


__all__ = ["CALLS_PATH", "Calls", "refusal_response"]
