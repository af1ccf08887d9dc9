"""The Python client of omni-grpc: a session that survives reconnects.

async with await DuplexClient.connect("127.0.0.1:50051") as client:
    await client.append_audio(pcm16)
    await client.commit(create_response=True)
    async for event in client.events():
        ...
"""

from omni_grpc.client.backoff import ReconnectPolicy
from omni_grpc.client.client import DuplexClient
from omni_grpc.client.errors import (
    CommandTooLarge,
    ConnectionLost,
    DuplexClientError,
    OpenRefused,
    ProtocolViolation,
    ResumeRefused,
    ResyncRequired,
    SessionClosed,
    SessionEnded,
    SessionExpired,
    SessionReplaced,
)
from omni_grpc.client.options import ClientOptions, ClientStats, ResumeHandle
from omni_grpc.client.transcription import Transcription

__all__ = [
    "ClientOptions",
    "ClientStats",
    "CommandTooLarge",
    "ConnectionLost",
    "DuplexClient",
    "DuplexClientError",
    "OpenRefused",
    "ProtocolViolation",
    "ReconnectPolicy",
    "ResumeHandle",
    "ResumeRefused",
    "ResyncRequired",
    "SessionClosed",
    "SessionEnded",
    "SessionExpired",
    "SessionReplaced",
    "Transcription",
]
