"""Request bodies read within a bound of size and time, for the bridge's HTTP endpoints.

A body is read before anything it asks for is done, so a caller that sends its body slowly, or
never, would hold a connection (and a descriptor) for as long as it likes: aiohttp bounds how
long the headers may take, not the body. :func:`read_body` ends the wait after ``timeout_s``
and refuses a body past ``limit_bytes`` from its declared length, or from what has come once
there is more; both answers are typed errors, and the connection is closed after them.
"""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web

# The longest a caller may take to send a whole body once its headers are in.
BODY_TIMEOUT_S = 10.0


class BodyRefused(Exception):
    """A body that came too slowly or is too large; :meth:`answer` sends its answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code

    async def answer(self, request: web.Request) -> web.StreamResponse:
        """Sends the typed error, then closes the connection: the rest of a refused body is
        never read (aiohttp would otherwise linger, reading it, for seconds more)."""
        body = {"error": {"type": "invalid_request_error", "code": self.code, "message": str(self)}}
        response = web.Response(
            status=self.status, body=orjson.dumps(body), content_type="application/json"
        )
        response.force_close()
        await response.prepare(request)
        await response.write_eof()
        if request.transport is not None:
            request.transport.close()  # after what is buffered, the answer, has gone
        return response


async def read_body(
    request: web.Request, *, limit_bytes: int, timeout_s: float | None = None
) -> bytes:
    """The whole body of ``request``; raises BodyRefused when it is larger than
    ``limit_bytes`` or does not come within ``timeout_s`` (:data:`BODY_TIMEOUT_S` if None)."""
    declared = request.content_length
    if declared is not None and declared > limit_bytes:
        raise _too_large(limit_bytes)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S if timeout_s is None else timeout_s):
            async for chunk in request.content.iter_any():
                size += len(chunk)
                if size > limit_bytes:
                    raise _too_large(limit_bytes)
                chunks.append(chunk)
    except TimeoutError:
        raise BodyRefused(
            408, "request_timeout", "the request's body did not come in time"
        ) from None
    return b"".join(chunks)


def _too_large(limit_bytes: int) -> BodyRefused:
    return BodyRefused(
        413, "request_too_large", f"the request's body is larger than {limit_bytes} bytes"
    )


__all__ = ["BODY_TIMEOUT_S", "BodyRefused", "read_body"]
