"""The one seam between sessions and whatever produces speech.

An :class:`Engine` opens :class:`EngineSession` objects. A session takes the commands the core
let through, in order, with ``submit``, as the frozen values of :mod:`omni_grpc.core.commands`
(never a protobuf request: the core read it once, and an engine dispatches on the value's
class), and yields its output as ``ConverseResponse`` events
(without ``seq``: numbering is the core's job) from ``events``. ``close`` ends it and frees what
it holds. This is the shape of both engines we must host:

* vLLM's ``AsyncLLM`` is request-oriented: an adapter keeps the conversation, turns a commit
  into a streaming ``generate`` call whose deltas become events, and turns cancel or barge-in
  into ``abort(request_id)``.
* vLLM-Omni's ``DuplexOmni`` is session-oriented: ``open_session`` → handle, ``handle.submit``
  ← our commands, ``handle.events`` → our events, ``close_session``; its own resume/detach are
  not needed because attachment lives in our core, above the engine.

Audio reaches an engine in the canonical form (:data:`omni_grpc.wire.pcm.CANONICAL_INPUT`)
or as pcm16 at a rate it declares native (``EngineFeatures.native_input_rates_hz``, which spares
a resample), and engines emit audio in one form (:data:`omni_grpc.wire.pcm.CANONICAL_OUTPUT`)
unless a delta names its own; the transport edge converts everything else. Nothing outside
``omni_grpc/engine/`` imports a model runtime. What sessions have in common (a worker that
applies commands in order, the response lifecycle, items, the event queue, the speech player)
is in :mod:`omni_grpc.engine.kit`.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable

from omni_grpc.core.commands import EngineCommand
from omni_grpc.core.limits import EngineFeatures
from omni_grpc.wire import pb


class EngineError(Exception):
    """An engine failed in a way that ends the session (``expire(ENGINE_FAILURE)``)."""


class EngineSession(abc.ABC):
    """One conversation inside an engine."""

    # Told, from the event loop, when a response reaches a moment no event shows: ("first_token",
    # response id) when the language model's first piece comes, which a speaking engine sends
    # only with the audio made from it. The server sets it to trace turns; None: nobody asks.
    on_stage: Callable[[str, str], None] | None = None
    # Set by a durable server (``--durability``): after applying each numbered command, the
    # session makes a marker, an event with no ``event`` but the command's number in
    # ``applied_client_seq``, behind the events the command made (yielded by ``events``, or
    # last in what ``submit_now`` returns); the server then knows that command's effect is in
    # what it stores (:mod:`omni_grpc.server.replay_log`). The marker is never published.
    report_applied: bool = False

    @abc.abstractmethod
    async def submit(self, command: EngineCommand) -> None:
        """Takes one command, already validated and numbered, with canonical audio.

        Must not block for long: queue the work and return. Refusals that depend on the
        engine's state (``response_already_active``, ``response_not_active``, …) come back
        as ``error`` events carrying the command's ``client_seq``.
        """

    def submit_now(self, command: EngineCommand) -> list[pb.ConverseResponse] | None:
        """Applies a cheap command at once, when nothing submitted before it waits, and returns
        the events it made (the caller publishes them, ahead of anything ``events`` yields
        later); None when it cannot, and then the caller hands it to ``submit``.

        The synchronous fast path: a command applied here skips the engine's mailbox and the
        reader of ``events``. An engine that offers nothing of the kind returns None.
        """
        return None

    @abc.abstractmethod
    def events(self) -> AsyncIterator[pb.ConverseResponse]:
        """Yields the session's output until it is closed."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Cancels whatever runs and frees the session's resources; idempotent."""

    async def restore_history(self, items: list[pb.ConversationItem]) -> None:  # noqa: B027
        """Takes the finished items of a conversation begun on another replica (a session
        adopted from the store), oldest first, as history, without any event. An engine that
        keeps no history of its own needs nothing here."""

    def queue_depths(self) -> tuple[int, int]:
        """Commands waiting for the engine and events waiting for the server, for the metrics
        (read at scrape time); an engine that queues nothing has (0, 0)."""
        return 0, 0


class Engine(abc.ABC):
    """A speech engine that hosts many sessions."""

    features: EngineFeatures

    async def start(self) -> None:  # noqa: B027 - engines without warm-up need nothing here
        """Loads models and warms up; called once before the first session."""

    async def stop(self) -> None:  # noqa: B027
        """Releases everything; called once at shutdown."""

    @abc.abstractmethod
    async def open_session(self, session_id: str, config: pb.SessionConfig) -> EngineSession:
        """Opens a conversation with the session's resolved configuration."""
