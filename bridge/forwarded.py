"""Who the client is, told on to the service: the bridge is a proxy too.

The service bounds what one client address may hold (omni_grpc.server.client_address). Every
stream a bridge opens comes from the bridge's address, so the bridge says whose it is, as a
proxy does: ``x-forwarded-for`` with what came in (a proxy in front of the bridge says who its
client was) and the address the bridge took the connection from, appended. The service
believes the chain only as far as the proxies it is told to trust (``--trusted-proxy``): it
reads from the right, so nothing a client writes into the header can stand for another client.
"""

from __future__ import annotations

from aiohttp import web

from omni_grpc.wire.keys import FORWARDED_FOR


def forwarded_for(request: web.BaseRequest) -> tuple[tuple[str, str], ...]:
    """The metadata that names ``request``'s client to the service (none if unknown)."""
    chain = [part.strip() for part in request.headers.getall("X-Forwarded-For", [])]
    if request.remote:
        chain.append(request.remote)
    chain = [part for part in chain if part]
    return ((FORWARDED_FOR, ", ".join(chain)),) if chain else ()
