"""Who a call comes from, when it came through proxies the operator trusts.

Behind HAProxy every call's peer is the proxy's own address, so a bound per client address (the
stream cap's ``per_peer``) would hold every client of the proxy together: one client that
floods would take the place of all. A proxy says who its client was in ``x-forwarded-for``
(HAProxy: ``option forwardfor``, which appends the address it accepted the connection from).
That header is only as true as whoever wrote its last entry, so it is read only from peers the
operator names (``--trusted-proxy``, addresses or networks), and from the right: each trusted
address is a proxy that appended what it saw, and the first untrusted address from the right
is the client. A client that writes the header itself only adds entries to the left of that.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterable, Sequence

from omni_grpc.server.stream_cap import peer_address
from omni_grpc.wire.keys import FORWARDED_FOR

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def trusted_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """The networks of ``--trusted-proxy`` entries (an address is a network of one); raises
    ValueError naming a bad one."""
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(f"--trusted-proxy: not an address or network: {entry!r}") from None
    return tuple(networks)


def _ip(text: str) -> Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.partition(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _peer_ip(peer: str) -> Address | None:
    """The IP of a gRPC peer (``ipv4:10.0.0.7:51234``, ``ipv6:[::1]:51234``)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    return _ip(urllib.parse.unquote(rest))  # grpc writes an IPv6 peer's brackets %-encoded


def _named(address: Address) -> str:
    """In the form :func:`peer_address` gives a peer's (``ipv4:10.0.0.7``, ``ipv6:[::1]``)."""
    return f"ipv4:{address}" if address.version == 4 else f"ipv6:[{address}]"


def client_address(
    peer: str, metadata: Sequence[tuple[str, str | bytes]] | None, trusted: Sequence[Network]
) -> str:
    """The address a per-address bound counts a call against: its peer's, or, where the peer
    is a trusted proxy, the first untrusted address of ``x-forwarded-for`` from the right
    (in the peer's form, ``ipv4:10.0.0.7``)."""
    if not trusted:
        return peer_address(peer)
    here = _peer_ip(peer)
    if here is None or not any(here in network for network in trusted):
        return peer_address(peer)
    chain: list[str] = []
    for name, value in metadata or ():
        if name == FORWARDED_FOR:
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            chain.extend(text.split(","))
    for entry in reversed(chain):
        address = _ip(entry)
        if address is None:
            break  # a garbled entry: nothing to its left can be believed
        if not any(address in network for network in trusted):
            return _named(address)
        here = address
    return _named(here)
