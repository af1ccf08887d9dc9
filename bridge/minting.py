"""``POST /v1/realtime/client_secrets``: a client secret for a backend that holds a bridge key.

With ``Authorization: Bearer <api key>`` (one of the bridge's keys) the endpoint answers
``{"value": "ek_…", "expires_at": <unix s>, "session": {…}}``, as OpenAI's endpoint of that name
does; the body may ask for ``expires_after.seconds`` (10 s to 2 h; 60 s when not given) and give
a ``session``: a realtime session's configuration, read as a first ``session.update``'s is (its
refusals too: a field the service cannot honour is a 400 naming it). The secret carries it, and
the socket it opens starts its session with it at once, as OpenAI's does; the answer's
``session`` is that configuration as asked (the service fills the rest, and names the session,
when the socket opens it). The body must come whole
within :data:`bridge.bodies.BODY_TIMEOUT_S` (408 after it; 413 past 64 KiB). A key with too many
secrets waiting to be used, or minting too fast, gets 429 with ``Retry-After`` and a typed
error (``client_secrets_outstanding`` or ``rate_limit_exceeded``); other keys mint on. The store
of the secrets is :mod:`bridge.client_secrets`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from bridge.bodies import BodyRefused, read_body
from bridge.client_secrets import DEFAULT_TTL_S, ClientSecrets, TooManySecrets
from bridge.errors import DialectError
from bridge.gate import Gate, unauthorized
from bridge.metrics import KEY_REFUSALS
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_credentials, key_label, key_matches

# The longest a refused mint waits for its answer (its retry hint, up to this).
MAX_HOLD_S = 1.0
# A mint's body is one small JSON object; anything much larger is not one.
MAX_BODY_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class _Asked:
    """What a mint's body asks for."""

    ttl_s: float
    session: dict[str, Any] | None  # the session as the client gave it


def minting_handler(
    gate: Gate,
    client_secrets: ClientSecrets,
    session_config: Callable[[Any], pb.SessionConfig],
) -> Handler:
    """``POST /v1/realtime/client_secrets``: one secret for a caller that holds a bridge key;
    ``session_config`` reads a body's ``session`` (the OpenAI dialect's reading, from
    :mod:`bridge.dialects`) and raises DialectError for what it refuses."""

    async def mint(request: web.Request) -> web.StreamResponse:
        refusal = gate.page_refusal(request)
        if refusal is not None:
            return refusal
        # Only a real key mints (in the header: a backend, not a page's subprotocol).
        key = bearer_credentials(request.headers.get("Authorization", ""))
        if not key_matches(key, gate.api_keys):
            return unauthorized()
        try:
            raw = await read_body(request, limit_bytes=MAX_BODY_BYTES)
        except BodyRefused as refused:
            return await refused.answer(request)
        try:
            asked = _asked(raw)
            config = session_config(asked.session) if asked.session is not None else None
            value, expires_at = client_secrets.mint(key, asked.ttl_s, config)
        except ValueError as error:
            return _json(400, {"error": {"type": "invalid_request_error", "message": str(error)}})
        except DialectError as refused:
            return _json(400, {"error": _session_error(refused)})
        except TooManySecrets as refused:
            KEY_REFUSALS.labels(key_label(key), refused.code).inc()
            # Answered once the hint has run out (at most a second): a caller that asks again
            # at once, on a kept-alive connection, asks at the rate it is allowed, and its
            # refusals cost the bridge little.
            await asyncio.sleep(min(refused.retry_after_s, MAX_HOLD_S))
            body = {"type": "rate_limit_exceeded", "code": refused.code, "message": str(refused)}
            response = _json(429, {"error": body})
            # Whole seconds (RFC 9110), rounded up so that a retry on time passes.
            response.headers["Retry-After"] = str(max(math.ceil(refused.retry_after_s), 1))
            return response
        answer: dict[str, Any] = {"value": value, "expires_at": math.floor(expires_at)}
        if asked.session is not None:
            kind = "transcription" if asked.session.get("type") == "transcription" else "realtime"
            what = (
                "realtime.transcription_session" if kind == "transcription" else "realtime.session"
            )
            answer["session"] = {**asked.session, "type": kind, "object": what}
        return _json(200, answer)

    return mint


def _session_error(refused: DialectError) -> dict[str, Any]:
    """A refused ``session`` as the dialect's error object, its ``param`` under ``session``."""
    param = refused.param.removeprefix("session.") if refused.param else ""
    return {
        "type": refused.error_type,
        "code": refused.code,
        "message": refused.message,
        "param": f"session.{param}" if param and param != "session" else "session",
    }


def _asked(body: bytes) -> _Asked:
    """What the request's JSON body asks for; the defaults for an empty body."""
    if not body.strip():
        return _Asked(DEFAULT_TTL_S, None)
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ValueError("the body is not JSON") from None
    expires_after = request.get("expires_after", {}) if isinstance(request, dict) else None
    if not isinstance(expires_after, dict):
        raise ValueError("expires_after must be an object")
    seconds = expires_after.get("seconds", DEFAULT_TTL_S)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError("expires_after.seconds must be a number")
    session = request.get("session")
    if session is not None and not isinstance(session, dict):
        raise ValueError("session must be an object")
    return _Asked(float(seconds), session)


def _json(status: int, body: object) -> web.Response:
    # A secret must not be cached on the way (proxies, the browser's cache).
    return web.Response(
        status=status,
        body=orjson.dumps(body),
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )
