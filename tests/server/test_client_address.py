"""Who a call comes from behind trusted proxies (omni_grpc.server.client_address), and what the
bridge tells the service of its own clients (bridge.forwarded)."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from bridge.forwarded import forwarded_for
from omni_grpc.server.client_address import client_address, trusted_networks

PROXIES = trusted_networks(["127.0.0.1", "10.0.0.0/24"])


def forwarded(value: str) -> list[tuple[str, str | bytes]]:
    return [("authorization", "Bearer k"), ("x-forwarded-for", value)]


@pytest.mark.parametrize(
    ("peer", "metadata", "client"),
    [
        # No proxy trusted, or a peer that is none: the peer's own address, whatever it says.
        ("ipv4:192.0.2.9:4000", forwarded("198.51.100.1"), "ipv4:192.0.2.9"),
        # A trusted proxy names its client.
        ("ipv4:127.0.0.1:4000", forwarded("198.51.100.1"), "ipv4:198.51.100.1"),
        # Read from the right: a client's own entries stand left of the one its proxy wrote.
        ("ipv4:127.0.0.1:4000", forwarded("6.6.6.6, 198.51.100.1"), "ipv4:198.51.100.1"),
        # Two trusted hops (a bridge behind HAProxy, behind HAProxy again).
        (
            "ipv4:127.0.0.1:4000",
            forwarded("198.51.100.1, 10.0.0.3, 127.0.0.1"),
            "ipv4:198.51.100.1",
        ),
        # A garbled entry: nothing left of it is believed, the last trusted hop counts.
        ("ipv4:127.0.0.1:4000", forwarded("198.51.100.1, not-an-address"), "ipv4:127.0.0.1"),
        # A trusted proxy that said nothing: the proxy itself.
        ("ipv4:127.0.0.1:4000", [], "ipv4:127.0.0.1"),
        # IPv6, as grpc writes its peers (%-encoded brackets; this one is no proxy), and a
        # port on an entry.
        ("ipv6:%5B::1%5D:4000", forwarded("[2001:db8::7]:5000"), "ipv6:%5B::1%5D"),
        ("ipv4:10.0.0.5:4000", forwarded("[2001:db8::7]:5000"), "ipv6:[2001:db8::7]"),
        ("ipv4:10.0.0.5:4000", [("x-forwarded-for", b"198.51.100.4")], "ipv4:198.51.100.4"),
    ],
)
def test_the_client_is_the_first_untrusted_address_from_the_right(
    peer: str, metadata: list[tuple[str, str | bytes]], client: str
) -> None:
    assert client_address(peer, metadata, PROXIES) == client


def test_with_no_proxy_trusted_the_header_is_never_read() -> None:
    assert client_address("ipv4:127.0.0.1:1", forwarded("9.9.9.9"), ()) == "ipv4:127.0.0.1"


def test_a_bad_trusted_proxy_is_named() -> None:
    with pytest.raises(ValueError, match=r"'10\.0\.0\.300'"):
        trusted_networks(["10.0.0.300"])


def test_the_bridge_appends_the_address_it_took_the_connection_from() -> None:
    request = make_mocked_request(
        "GET", "/v1/realtime", headers={"X-Forwarded-For": "198.51.100.1"}
    )
    # make_mocked_request's transport has no peer: the chain is what came in.
    assert forwarded_for(request) == (("x-forwarded-for", "198.51.100.1"),)
    assert forwarded_for(make_mocked_request("GET", "/v1/realtime")) == ()
