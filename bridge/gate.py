"""What a request must show before the bridge serves it: a known Host, an allowed Origin, a key.

Without keys (the default, for local use) the bridge would otherwise be open to every web page
the user visits: a page on ``https://evil.example`` may open a websocket to ``127.0.0.1``, and a
DNS-rebinding page reaches it under its own name. So, before any websocket is upgraded:

* **Host** must name the bridge: a localhost name, the address it was bound to, an IP address
  (an address cannot be rebound: rebinding always arrives under the attacker's name), or a name
  given with ``allowed_hosts`` (``*`` turns the check off). Refused with 403.
* **Origin**, when a browser sends one, must be the bridge's own origin (the Host the request
  came to), or match ``allowed_origins``: exact origins, ``*`` as the port for any port, or
  ``*`` alone for every origin, ``null`` included. Clients that send no Origin (SDKs, servers)
  are not browsers acting for a page and pass. Refused with 403.
* **Key**, when keys are configured: one of them, a short-lived client secret one of them
  minted (:mod:`bridge.client_secrets`), or a resume secret that resumes one session
  (:mod:`bridge.resume_secrets`); else 401 with ``WWW-Authenticate: Bearer``.

The page and its static files go through the Host check too, and every response carries
headers that keep the page out of frames and its files from being sniffed as something else.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from multidict import CIMultiDict

from bridge.client_secrets import ClientSecrets
from bridge.resume_secrets import PREFIX as RESUME_PREFIX
from bridge.resume_secrets import ResumeSecrets
from omni_grpc.wire import pb
from omni_grpc.wire.keys import bearer_credentials, key_matches

KEY_PROTOCOL_PREFIX = "openai-insecure-api-key."
ANY = "*"
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# The pages a local user runs: any port on a loopback name, over http or https.
DEFAULT_ALLOWED_ORIGINS = tuple(
    f"{scheme}://{name}:{ANY}"
    for scheme in ("http", "https")
    for name in ("localhost", "127.0.0.1", "[::1]")
)
# The page loads its script, worklet and stylesheet from the bridge and talks to the bridge's
# own websocket; nothing else (no inline code, no framing, no other hosts).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
}
# Paths a load balancer probes under whatever name it knows the bridge by.
UNGATED_PATHS = frozenset({"/health"})


def _split_authority(authority: str) -> tuple[str, str]:
    """(name, port) of ``host[:port]`` or ``[v6][:port]``, lower case; the port '' if absent."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        name, _, rest = authority[1:].partition("]")
        return name, rest.removeprefix(":")
    if authority.count(":") == 1:
        name, _, port = authority.partition(":")
        return name, port
    return authority, ""  # a name without a port, or a bare IPv6 address


def _default_port(scheme: str) -> str:
    return "443" if scheme == "https" else "80"


def _origin_parts(origin: str) -> tuple[str, str, str] | None:
    """(scheme, name, port) of an origin or an allow-list entry; None for ``null`` or garbage."""
    scheme, sep, authority = origin.strip().lower().partition("://")
    if not sep or scheme not in ("http", "https") or not authority or "/" in authority:
        return None
    name, port = _split_authority(authority)
    return scheme, name, port or _default_port(scheme)


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Admitted:
    """Who a request stands for, once the gate let it through."""

    key: str  # what the bridge presents to the service
    # Admitted with a secret (a client or resume secret), not a key: a page that holds nothing
    # else, and is handed resume secrets to come back with.
    by_secret: bool = False
    only_session: str = ""  # a resume secret's session: the one thing the socket may resume
    # The configuration a client secret was minted with: the socket's session opens with it.
    session: pb.SessionConfig | None = None


@dataclass(frozen=True, slots=True)
class Gate:
    """The checks made before a request is served; see the module's docstring."""

    allowed_origins: tuple[str, ...] = DEFAULT_ALLOWED_ORIGINS
    allowed_hosts: tuple[str, ...] = ()  # names besides localhost, the bound address, IPs
    bound_host: str = "127.0.0.1"
    api_keys: tuple[str, ...] = ()
    client_secrets: ClientSecrets | None = None  # the secrets the keys minted, if any
    resume_secrets: ResumeSecrets | None = None  # signed by the keys, if any

    def host_allowed(self, host_header: str | None) -> bool:
        """Whether the Host header names this bridge (no header: not a browser; allowed)."""
        if host_header is None or ANY in self.allowed_hosts:
            return True
        name = _split_authority(host_header)[0]
        named = (self.bound_host, *self.allowed_hosts)
        allowed = {*LOCAL_NAMES, *(_split_authority(host)[0] for host in named)}
        return name in allowed or _is_ip_address(name)

    def origin_allowed(self, origin: str | None, host_header: str | None) -> bool:
        """Whether a page from ``origin`` may use the bridge (no Origin: not a page; allowed)."""
        if origin is None or ANY in self.allowed_origins:
            return True
        parts = _origin_parts(origin)
        if parts is None:  # "null": sandboxed frames, file:// pages, opaque redirects
            return False
        scheme, name, port = parts
        if host_header is not None and _same_authority(scheme, name, port, host_header):
            return True
        for pattern in self.allowed_origins:
            allowed = _origin_parts(pattern)
            if allowed is not None and allowed[:2] == (scheme, name) and allowed[2] in (port, ANY):
                return True
        return False

    def page_refusal(self, request: web.Request) -> web.Response | None:
        """The 403 for a request whose Host or Origin is not allowed; None when they are."""
        host = request.headers.get("Host")
        if not self.host_allowed(host):
            return _refuse(403, "host_not_allowed")
        if not self.origin_allowed(request.headers.get("Origin"), host):
            return _refuse(403, "origin_not_allowed")
        return None

    def admit(self, request: web.Request) -> Admitted | web.Response:
        """Who ``request`` stands for, or the response that refuses it.

        A client secret is used up here and stands for the key that minted it; a resume
        secret stands for its session's key, for that session alone.
        """
        refusal = self.page_refusal(request)
        if refusal is not None:
            return refusal
        key = presented_key(request)
        if not self.api_keys or key_matches(key, self.api_keys):
            return Admitted(key)
        if key.startswith(RESUME_PREFIX) and self.resume_secrets is not None:
            resumes = self.resume_secrets.redeem(key, time.time())
            if resumes is not None:
                return Admitted(resumes[0], by_secret=True, only_session=resumes[1])
            return unauthorized()
        minted = self.client_secrets.redeem(key) if self.client_secrets is not None else None
        if minted is None:
            return unauthorized()
        return Admitted(minted.key, by_secret=True, session=minted.session)


def unauthorized() -> web.Response:
    """401 for a missing or bad key."""
    response = _refuse(401, "invalid_api_key")
    response.headers["WWW-Authenticate"] = 'Bearer realm="omni-grpc"'
    return response


def _same_authority(scheme: str, name: str, port: str, host_header: str) -> bool:
    """Whether an origin's host and port are those the request was sent to (its Host)."""
    host_name, host_port = _split_authority(host_header)
    return (name, port) == (host_name, host_port or _default_port(scheme))


def _refuse(status: int, reason: str) -> web.Response:
    """A short plain-text refusal, with the security headers (no upgrade, no page, follows)."""
    return web.Response(status=status, text=f"{reason}\n", headers=CIMultiDict(SECURITY_HEADERS))


def presented_key(request: web.Request) -> str:
    """The API key of a connection: a bearer header, or the browser subprotocol."""
    key = bearer_credentials(request.headers.get("Authorization", ""))
    if key:
        return key
    for protocol in request.headers.get("Sec-WebSocket-Protocol", "").split(","):
        protocol = protocol.strip()
        if protocol.startswith(KEY_PROTOCOL_PREFIX):
            return protocol[len(KEY_PROTOCOL_PREFIX) :]
    return ""


def host_middleware(gate: Gate) -> Middleware:
    """Refuses every request whose Host does not name the bridge (health probes excepted)."""

    @web.middleware
    async def check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in UNGATED_PATHS and not gate.host_allowed(request.headers.get("Host")):
            return _refuse(403, "host_not_allowed")
        return await handler(request)

    return check_host


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """The ``on_response_prepare`` signal: the security headers on every response."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
