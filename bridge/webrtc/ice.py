"""What ICE offers on a bridge's calls: its host addresses, and STUN or TURN servers.

aiortc (through aioice) gathers a host candidate on each address of the machine's interfaces,
but never on 127.0.0.1; and a browser's offer carries no candidates of its own (its addresses
reach the bridge later, in its connectivity checks, which aioice answers as peer-reflexive
candidates). So a bridge reachable only on loopback, or a test machine whose only peer is
itself, would offer nothing the caller can reach. :func:`offer_addresses` adds the addresses
an operator names (``--webrtc-address``: 127.0.0.1 for loopback, a LAN address aioice
would not pick) to those aioice gathers; a bridge bound to a loopback address adds 127.0.0.1
itself. It does so by wrapping aioice's address lister, once per process: aioice has no
option for it.

Behind NAT, name a STUN server (a server-reflexive candidate, the public address) or a TURN
server (a relayed candidate, for callers whose networks allow no direct path) with
``--ice-server``: ``stun:host:port`` or ``turn:user:secret@host:port`` (``turns:`` for
TURN over TLS, ``?transport=tcp`` for TCP). aioice uses the first STUN and the first TURN
server of the list.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote

import aioice.ice
from aiortc import RTCIceServer

_extra: set[str] = set()  # the addresses added to aioice's, process-wide
_lister = aioice.ice.get_host_addresses  # aioice's own


def _with_extra(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    found = _lister(use_ipv4, use_ipv6)
    wanted = [a for a in sorted(_extra) if (":" in a and use_ipv6) or (":" not in a and use_ipv4)]
    return found + [a for a in wanted if a not in found]


def offer_addresses(addresses: Iterable[str]) -> None:
    """Adds ``addresses`` to those every call's ICE gathers host candidates on."""
    _extra.update(addresses)
    aioice.ice.get_host_addresses = _with_extra


def ice_servers(urls: Iterable[str]) -> list[RTCIceServer]:
    """aiortc's servers for ``urls`` (``stun:host:port``, ``turn:user:secret@host:port``)."""
    servers = []
    for url in urls:
        scheme, _, rest = url.partition(":")
        credentials, at, address = rest.rpartition("@")
        if not at:
            servers.append(RTCIceServer(urls=url))
            continue
        user, _, secret = credentials.partition(":")
        servers.append(
            RTCIceServer(
                urls=f"{scheme}:{address}", username=unquote(user), credential=unquote(secret)
            )
        )
    return servers


__all__ = ["ice_servers", "offer_addresses"]
