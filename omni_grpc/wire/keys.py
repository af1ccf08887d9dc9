"""API keys as every transport checks them: a bearer key compared in constant time.

Keys are compared with ``hmac.compare_digest`` against every configured key (no early exit), so
response timing does not reveal how much of a guess was right. Keys are never logged. The
scheme is matched without regard to case (RFC 7235: ``bearer x`` is ``Bearer x``).

``GetSession`` takes the session's resume token from call metadata too (``omni-resume-token``):
logging interceptors record message bodies, and call metadata is where credentials live. The
token is compared in constant time by the core, like a key, and never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence

BEARER = "Bearer "
_SCHEME = "bearer"
RESUME_TOKEN_HEADER = "omni-resume-token"
# The routing key of the replica that holds a session: servers send it as initial metadata (and
# with a ``session_elsewhere`` refusal, the owner's), clients send it back on every later call of
# the session, and a proxy in front of several replicas routes on it (docs/deploy.md).
ROUTE_HEADER = "x-omni-route"
# A refused stream's google.rpc.Status, also sent in the response headers: a proxy may lose the
# trailers of a stream the server ends before the client half-closed (HAProxy 2.6 resets it with
# CANCEL, haproxy/haproxy#1219), and a client that sees CANCELLED reads the refusal here.
REFUSAL_HEADER = "x-omni-refusal-bin"
# Who a proxy's client was, appended by each proxy on the way (HAProxy's ``option forwardfor``,
# the bridge's bridge.forwarded); a replica believes it as far as --trusted-proxy says.
FORWARDED_FOR = "x-forwarded-for"


def route_of(metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
    """The routing key in call or response metadata; empty when there is none."""
    for name, value in metadata or ():
        if name == ROUTE_HEADER and isinstance(value, str):
            return value
    return ""


def key_matches(presented: str, keys: Sequence[str]) -> bool:
    """Says in constant time (per key) whether ``presented`` is one of ``keys``."""
    ok = False
    candidate = presented.encode()
    for key in keys:
        ok |= hmac.compare_digest(candidate, key.encode())
    return ok


# What key labels are keyed with. A plain hash of a key let anyone who reads /metrics check a
# guessed key against its label; an HMAC under a secret of the deployment does not. Random per
# process unless the operator gives one (OMNI_GRPC_METRICS_LABEL_SECRET, or
# metrics_label_secret in the config file), so that every replica and bridge labels a key alike.
_label_secret = secrets.token_bytes(32)
LABEL_SECRET_ENV = "OMNI_GRPC_METRICS_LABEL_SECRET"


def set_label_secret(secret: str) -> None:
    """Keys every later label with ``secret`` (at start-up, before any is counted)."""
    global _label_secret  # one value per process, set once at start-up
    _label_secret = secret.encode()


def use_label_secret(environ: Mapping[str, str]) -> None:
    """Keys the labels with the deployment's secret, if ``environ`` gives one (each process
    of a service or bridge calls this at start-up; else it keeps a secret of its own)."""
    secret = environ.get(LABEL_SECRET_ENV, "")
    if secret:
        set_label_secret(secret)


def key_label(key: str) -> str:
    """The label a key is counted under in metrics: 12 hex digits of its HMAC-SHA256 under the
    deployment's label secret (``none`` for no key), so an operator can tell keys apart
    without the metrics holding any of them, and nobody without the secret can confirm a
    guessed key from its label. ``omni-grpc key-label`` prints a key's."""
    if not key:
        return "none"
    return hmac.new(_label_secret, key.encode(), hashlib.sha256).hexdigest()[:12]


def bearer_credentials(authorization: str) -> str:
    """The key of an ``Authorization`` value in the bearer scheme; empty for any other value."""
    scheme, _, credentials = authorization.strip().partition(" ")
    return credentials.strip() if scheme.lower() == _SCHEME else ""


def bearer_key(metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
    """Extracts the bearer key from call metadata; empty when there is none."""
    for name, value in metadata or ():
        if name == "authorization" and isinstance(value, str):
            return bearer_credentials(value)
    return ""


def bearer_metadata(key: str) -> tuple[tuple[str, str], ...]:
    """Call metadata that presents ``key`` (none for an empty key)."""
    return (("authorization", f"{BEARER}{key}"),) if key else ()


def resume_token(metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
    """The resume token a ``GetSession`` call presents in its metadata; empty when none."""
    for name, value in metadata or ():
        if name == RESUME_TOKEN_HEADER and isinstance(value, str):
            return value
    return ""


def resume_token_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata that presents a session's resume token to ``GetSession``."""
    return ((RESUME_TOKEN_HEADER, token),)
