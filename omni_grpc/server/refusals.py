"""The server's log of refused streams and lookups: which session, which peer, which code.

A refused resume names the session id it asked for and the peer it came from, so an operator
can tell a client with a stale handle from someone probing for sessions. The client learns
nothing from the refusal (see ``omni_grpc.core.credentials``); the log is where the detail goes.
A probe makes refusals as fast as it can send, so the log is rate-limited: at most
``max_lines`` lines per ``interval_s`` on the server's clock, and the first refusal of a later
interval says how many were left out before it. The lines cannot all be spent by one prober to
hide another: the first refusal of each peer address not yet logged in the interval is logged
all the same (up to ``MAX_NEW_PEERS`` of them an interval, so that a prober with many addresses
cannot flood the log either). The session id is the client's text, so it is logged shortened
and quoted, never as given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from omni_grpc.server.stream_cap import peer_address

logger = logging.getLogger(__name__)

MAX_LINES = 20  # per interval
MAX_NEW_PEERS = 100  # lines past MAX_LINES for addresses not logged yet, per interval
INTERVAL_S = 60.0
SESSION_ID_CHARS = 64  # ids are 37 characters ("sess_" and 32 hex); longer ones are cut


class RefusalLog:
    """Logs refusals with session id and peer, at most ``max_lines`` per ``interval_s``."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        max_lines: int = MAX_LINES,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._clock = clock
        self._max_lines = max_lines
        self._interval_s = interval_s
        self._interval_start = clock()
        self._lines = 0
        self._peers: set[str] = set()  # addresses logged in the current interval
        self.suppressed = 0  # refusals of the current interval not logged

    def refused(self, what: str, session_id: str, peer: str, code: str) -> None:
        """Logs one refusal of ``what`` (``resume``, ``open``, ``GetSession``) unless the
        interval's lines are spent."""
        now = self._clock()
        if now - self._interval_start >= self._interval_s:
            if self.suppressed:
                logger.warning(
                    "%d more refusals were not logged (at most %d lines per %.0f s)",
                    self.suppressed,
                    self._max_lines,
                    self._interval_s,
                )
            self._interval_start, self._lines, self.suppressed = now, 0, 0
            self._peers.clear()
        address = peer_address(peer)
        if self._lines >= self._max_lines and (
            address in self._peers or self._lines >= self._max_lines + MAX_NEW_PEERS
        ):
            self.suppressed += 1
            return
        self._lines += 1
        self._peers.add(address)
        shown = repr(session_id[:SESSION_ID_CHARS]) if session_id else "-"
        fields = {"session_id": session_id[:SESSION_ID_CHARS]} if session_id else None
        # A refused resume or lookup may be someone probing for sessions: a warning. A stream
        # refused what it asked to open (a configuration, a full server), or a call refused for
        # a bound (a key at its share), is routine: info.
        level = logging.INFO if what in ("stream", "call") else logging.WARNING
        logger.log(
            level, "%s refused (%s): session %s, peer %s", what, code, shown, peer, extra=fields
        )
