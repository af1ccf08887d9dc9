"""Resume secrets: how a page opened with a client secret resumes its session after a drop.

A client secret (:mod:`bridge.client_secrets`) opens one websocket and is used up; a page that
has only that (``?key=ek_…``) has nothing to present when its network drops and it must come
back, and its session would expire. So, on a socket a client secret (or a resume secret)
opened, the bridge adds a ``resume_secret`` to ``session.created`` and ``session.resumed``
(with the duplex extensions). The page presents it, as it presented its key, to resume:

* it stands for the key the session is bound to (the one the client secret stood for), which
  the bridge presents to the service, as it did when the session opened;
* it resumes that one session and nothing else: the socket's first event must be the
  ``session.resume`` of its session id (anything else is refused), and the service still asks
  for the session's current resume token, so the secret alone opens nothing;
* it is a signed statement, not a stored one: any bridge process with the same keys takes it
  (several ``--bridge-workers``, several bridges behind a proxy), and none keeps any state.
  The signing key is derived from the bridge's API keys, so whoever can forge one holds a key
  already; it lives :data:`TTL_S`, and each resume hands out a fresh one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
from collections.abc import Sequence

PREFIX = "rs_"
TTL_S = 24 * 3600.0  # a session may last hours between two drops
_DIGEST_BYTES = 16  # of the key: names it among the bridge's keys, never reveals it
_MAC_BYTES = 16
_MAX_SESSION_ID_CHARS = 128


def _key_digest(key: str) -> bytes:
    return hashlib.sha256(b"omni-grpc resume secret key\0" + key.encode()).digest()[:_DIGEST_BYTES]


class ResumeSecrets:
    """Issues and reads the resume secrets of one bridge's keys (see the module)."""

    def __init__(self, api_keys: Sequence[str]) -> None:
        self._keys = {_key_digest(key): key for key in api_keys}
        signing = hashlib.sha256(b"omni-grpc resume secret\0")
        for key in sorted(api_keys):
            signing.update(hashlib.sha256(key.encode()).digest())
        self._signing_key = signing.digest()

    def issue(self, key: str, session_id: str, now: float) -> str:
        """A secret that resumes ``session_id`` as ``key`` until ``now`` + :data:`TTL_S`."""
        payload = _key_digest(key) + struct.pack(">d", now + TTL_S) + session_id.encode()
        return PREFIX + _b64(payload + self._mac(payload))

    def redeem(self, presented: str, now: float) -> tuple[str, str] | None:
        """(key, session id) of a valid, unexpired secret; None for anything else."""
        if not presented.startswith(PREFIX) or len(presented) > 2 * _MAX_SESSION_ID_CHARS:
            return None
        try:
            raw = base64.urlsafe_b64decode(presented[len(PREFIX) :] + "==")
        except ValueError:
            return None
        payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        if len(payload) <= _DIGEST_BYTES + 8 or not hmac.compare_digest(mac, self._mac(payload)):
            return None
        (expires_at,) = struct.unpack(">d", payload[_DIGEST_BYTES : _DIGEST_BYTES + 8])
        key = self._keys.get(payload[:_DIGEST_BYTES])
        if key is None or now >= expires_at:
            return None
        try:
            return key, payload[_DIGEST_BYTES + 8 :].decode()
        except UnicodeDecodeError:
            return None

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._signing_key, payload, hashlib.sha256).digest()[:_MAC_BYTES]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


__all__ = ["PREFIX", "TTL_S", "ResumeSecrets"]
