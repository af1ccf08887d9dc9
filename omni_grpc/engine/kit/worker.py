"""The worker session: one task applies a session's commands in order, from a bounded mailbox.

``submit`` puts a command in the mailbox and returns; the worker takes commands one at a time
and calls the handler that the dispatch table (:meth:`WorkerSession._command_handlers`) holds
for the command's class (a value of :mod:`omni_grpc.core.commands`). A handler that raises
:class:`CommandError` refuses its command with an ``error`` event carrying the command's
``client_seq``; any other exception is a bug, which ends the session: ``events`` raises
:class:`EngineError` once the reader has taken what was queued before it.

A handler is either a coroutine function or a plain function. Plain handlers need no await:
they change state and queue nothing, or raise a refusal. They are the seam for the synchronous
path: ``submit_now`` applies an append whose handler is plain (or one of the session's
:meth:`WorkerSession._inline_handlers`, which return the events they make) at once, without the
mailbox hop, when every command before it has been applied and every event before it taken.

The worker is the only writer of a session's state, except for the tasks it starts (the
player of the running response, and background jobs such as transcriptions), which write
only the progress of their own job. A background job whose result changes the session (a
judgement that ends a turn) hands it to the worker with :meth:`WorkerSession._post`: the
worker runs it in order with the commands.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, ClassVar, Self, TypeAlias

from omni_grpc.core import commands
from omni_grpc.core.commands import EngineCommand
from omni_grpc.core.errors import CommandError
from omni_grpc.engine.base import EngineError, EngineSession
from omni_grpc.engine.kit.event_queue import EventQueue
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

# A command handler: plain, or a coroutine function (see the module docstring).
# Typed as taking any command: each handler takes the class it is filed under in the table.
Handler: TypeAlias = Callable[[Any], Awaitable[None] | None]
# A handler for the synchronous path: applies the command and returns the events it made.
InlineHandler: TypeAlias = Callable[[Any], list[pb.ConverseResponse]]
# A dispatch table: a handler per command class.
Handlers: TypeAlias = dict[type[EngineCommand], Handler]
InlineHandlers: TypeAlias = dict[type[EngineCommand], InlineHandler]
# The commands the synchronous path takes when their handler is plain: the cheap, frequent ones.
INLINE_KINDS: frozenset[type[EngineCommand]] = frozenset({commands.AppendAudio})
# Work a background job hands to the worker (:meth:`WorkerSession._post`).
Job: TypeAlias = Callable[[], Awaitable[None]]


class WorkerSession(EngineSession):
    """A session whose commands one worker task applies in order; see the module docstring."""

    # The engine's name, in log lines and in the error that ends a failed session.
    engine_name: ClassVar[str] = "engine"
    # Wraps every handler of the dispatch tables when a session starts (a benchmark counts the
    # engine's own CPU with it, ``omni_grpc.bench.meter``); None: handlers run as they are.
    handler_meter: ClassVar[Callable[[Callable[..., Any]], Callable[..., Any]] | None] = None

    def __init__(
        self,
        session_id: str,
        config: pb.SessionConfig,
        *,
        queue_size: int,
        on_close: Callable[[Self], None],
    ) -> None:
        self.id = session_id
        self.config = config
        self._on_close: Callable[[Self], None] = on_close
        self._mailbox: asyncio.Queue[EngineCommand | Job] = asyncio.Queue(queue_size)
        self._events = EventQueue(queue_size)
        self._handlers: Handlers = {}
        # Empty until the worker has opened the session: nothing runs ahead of ``_on_open``.
        self._inline: InlineHandlers = {}
        self._player: asyncio.Task[None] | None = None  # plays the running response
        self._tasks: set[asyncio.Task[None]] = set()  # background jobs, cancelled at the end
        self._failure: BaseException | None = None
        self._closed = False
        self._busy = False
        self._worker = asyncio.create_task(self._run(), name=f"{self.engine_name}-{session_id}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id})"

    def _command_handlers(self) -> Handlers:
        """The dispatch table: a handler per command class; other commands are refused."""
        return {}

    def _input_stage(self, table: Handlers) -> Handlers:
        """The last say over the dispatch table, once the subclasses have filled it: the
        conversation session puts its noise reduction before whichever handler hears input."""
        return table

    def _inline_handlers(self) -> InlineHandlers:
        """Handlers for the synchronous path beyond the plain ones of :data:`INLINE_KINDS`."""
        return {}

    async def _on_open(self) -> None:
        """Runs on the worker before the first command (e.g. to report bad session options)."""

    async def _on_close_begin(self) -> None:
        """Runs once at close, before the session's tasks are cancelled and its events end:
        an engine whose session lives elsewhere ends it here (new commands are ignored)."""

    # -- the seam ------------------------------------------------------------------------

    async def submit(self, command: EngineCommand) -> None:
        if self._closed or self._failure is not None:
            logger.debug(
                "session %s: command after the end ignored", self.id, extra={"session_id": self.id}
            )
            return
        await self._mailbox.put(command)

    def submit_now(self, command: EngineCommand) -> list[pb.ConverseResponse] | None:
        handler = self._inline.get(type(command))
        if (
            handler is None
            or self._busy
            or self._closed
            or self._failure is not None
            or not self._mailbox.empty()
            or self._events.unread
        ):
            return None  # the mailbox keeps the order: the worker applies it after the rest
        try:
            made = handler(command)
        except CommandError as error:
            body = error.to_error(client_seq=command.client_seq, event_id=command.event_id)
            made = [pb.ConverseResponse(error=body)]
        if self.report_applied and command.client_seq:
            return [*made, pb.ConverseResponse(applied_client_seq=command.client_seq)]
        return made

    def queue_depths(self) -> tuple[int, int]:
        return self._mailbox.qsize(), len(self._events)

    async def events(self) -> AsyncIterator[pb.ConverseResponse]:
        while (event := await self._events.get()) is not None:
            yield event
        if self._failure is not None:
            raise EngineError(f"{self.engine_name} session {self.id} failed") from self._failure

    async def close(self: Self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._on_close_begin()
        tasks = [self._worker, *self._tasks, *([self._player] if self._player else [])]
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        self._events.end(drop=True)
        while not self._mailbox.empty():  # frees a submit that still waits for room
            self._mailbox.get_nowait()
        self._on_close(self)

    async def idle(self) -> None:
        """Waits until every command submitted so far has been applied and the reader has
        taken the events they caused (tests and benchmarks step the input clock with it)."""
        # Polled: the three conditions belong to three objects, and this is not a hot path.
        while not self._mailbox.empty() or self._busy or len(self._events):  # noqa: ASYNC110
            await asyncio.sleep(0.001)

    async def drained(self) -> None:
        """Waits as :meth:`idle` does, and until the background jobs (transcriptions,
        judgements) are done too and handed back what they found: tests step the input
        clock with it so that what they assert does not depend on the machine's speed."""
        while True:  # polled, as idle() is: a job may post to the mailbox as it ends
            await self.idle()
            if not self._tasks and self._mailbox.empty():
                return
            await asyncio.sleep(0.001)

    # -- the worker ----------------------------------------------------------------------

    async def _run(self) -> None:
        self._handlers = self._metered(self._input_stage(self._command_handlers()))
        try:
            await self._on_open()
            self._inline = self._plain_inline() | self._metered(self._inline_handlers())
            while True:
                command = await self._mailbox.get()
                self._busy = True
                await self._apply(command)
                # A large append's audio would otherwise stay until the next command.
                del command
                self._busy = not self._mailbox.empty()
        except Exception as error:  # a bug must end the session, not leave it hanging
            logger.exception(
                "session %s: %s worker failed",
                self.id,
                self.engine_name,
                extra={"session_id": self.id},
            )
            self._fail(error)

    def _metered(self, table: dict[type[EngineCommand], Any]) -> dict[type[EngineCommand], Any]:
        meter = type(self).handler_meter  # read on the class: a plain function, not bound
        if meter is None:
            return table
        return {kind: meter(handler) for kind, handler in table.items()}

    def _plain_inline(self) -> InlineHandlers:
        inline: InlineHandlers = {}
        for kind in INLINE_KINDS:
            handler = self._handlers.get(kind)
            if handler is not None and not inspect.iscoroutinefunction(handler):
                inline[kind] = _making_no_events(handler)
        return inline

    def _fail(self, error: BaseException) -> None:
        self._failure = error
        for task in (self._player, *self._tasks):
            if task is not None:
                task.cancel()
        self._events.end(drop=False)

    async def _post(self, job: Job) -> None:
        """Runs ``job`` on the worker, after the commands already submitted: how a background
        job changes the session without racing the commands."""
        if not self._closed and self._failure is None:
            await self._mailbox.put(job)

    async def _apply(self, command: EngineCommand | Job) -> None:
        if not isinstance(command, tuple):  # a job (every command is a named tuple)
            await command()
            return
        handler = self._handlers.get(type(command))
        try:
            if handler is None:
                kind = commands.kind_of(command)
                raise CommandError(
                    "bad_event", f"the {self.engine_name} engine does not take {kind}"
                )
            pending = handler(command)
            if pending is not None:
                await pending
        except CommandError as error:
            body = error.to_error(client_seq=command.client_seq, event_id=command.event_id)
            await self._events.put(pb.ConverseResponse(error=body))
        if self.report_applied and command.client_seq:
            await self._events.put(pb.ConverseResponse(applied_client_seq=command.client_seq))

    def _spawn(self, job: Coroutine[Any, Any, None]) -> None:
        """Runs ``job`` in the background until it ends or the session does."""
        task = asyncio.create_task(job)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _making_no_events(handler: Handler) -> InlineHandler:
    """A plain handler as an inline one: it queues nothing, so it makes no events."""

    def apply(command: EngineCommand) -> list[pb.ConverseResponse]:
        handler(command)
        return []

    return apply
