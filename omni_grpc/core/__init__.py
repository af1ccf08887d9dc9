"""The sans-io session core: every rule about sessions, with no I/O, clock or event loop.

Transports feed it commands, engine output and the current time; it answers with
:class:`Effects`. A test (``tests/core/test_purity.py``) keeps asyncio, grpc, aiohttp, numpy
and torch out of this package.
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
