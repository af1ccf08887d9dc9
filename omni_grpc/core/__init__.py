"""The sans-io session core: every rule about sessions, with no I/O, clock or event loop.

Transports feed it commands, engine output and the current time; it answers with
:class:`Effects`. A test (``tests/core/test_purity.py``) keeps asyncio, grpc, aiohttp, numpy
and torch out of this package. The parts, each with the rules it keeps:

* ``registry.py``: every session of a server: opening (capacity, drain), finding, tombstones.
* ``session_queue.py``: new sessions waiting for room at capacity: order, priority classes,
  bounds, estimates.
* ``session.py``: one session's lifecycle: attachments, resume and replay, the one ending
  (``state.py``: its table; ``credentials.py``: its resume tokens).
* ``admission.py``: commands applied once, bounded pending input, idle expiry
  (``validation.py``: the stateless checks of a command; ``config.py``: the configuration).
* ``responses.py``: no stale output, and the turn state as a table.
* ``delivery.py``: numbered events and the :class:`Effects` they travel in (``journal.py``:
  the log that makes resume exact).
* ``rate_limits.py`` and ``key_shares.py``: what a session and an API key may send, hold and
  start (the numbers of a key's are the tenant policy's, ``omni_grpc/wire/tenant_policy.py``).
* ``limits.py`` and ``errors.py``: the server's limits and the core's errors.
"""

from omni_grpc.core.delivery import Effects
from omni_grpc.core.errors import CommandError, Status, StreamRefused
from omni_grpc.core.limits import EngineFeatures, Limits
from omni_grpc.core.registry import Registry
from omni_grpc.core.session import ResumeGap, Session
from omni_grpc.core.state import State

__all__ = [
    "CommandError",
    "Effects",
    "EngineFeatures",
    "Limits",
    "Registry",
    "ResumeGap",
    "Session",
    "State",
    "Status",
    "StreamRefused",
]
