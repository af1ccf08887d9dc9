"""The asyncio side of one session: the core session, its engine session, and its streams.

A :class:`SessionHost` is the only thing that calls into a core :class:`Session`, always from
the event loop thread, so the core needs no locks. It carries out the core's effects: payloads
go to the bounded send queue of the stream they are for, engine commands go to the engine in
order from the stream's reader, and an engine pump feeds engine output back into the core. It
reads the server's one clock (see :mod:`omni_grpc.server.sessions`). Input audio
is turned into a form the engine takes on the way in (untouched when it is already native to
it), and output audio into the session's format on the way out, so neither the core nor the
engines ever see another format.

Whoever observes a host (tracing, durability, recording, the turn metrics) registers a tap
(:mod:`omni_grpc.server.taps`) and is told what the host did; nothing wraps or replaces a
method. Each hook has its own list of taps, so a host pays only for what is observed: with no
tap, one truth test of an empty tuple per command and per event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from time import perf_counter
from typing import Any, cast

from omni_grpc.core import Effects, Session
from omni_grpc.core.commands import (
    AppendAudio,
    CancelInput,
    ClearAudio,
    CommitAudio,
    CreateItem,
    EngineCommand,
    UpdateSession,
)
from omni_grpc.core.errors import CommandError
from omni_grpc.engine.base import EngineSession
from omni_grpc.server import metrics
from omni_grpc.server.edge import OUTPUT_ENDING_EVENTS, AudioEdge
from omni_grpc.server.send_queue import SendQueue
from omni_grpc.server.taps import Taps
from omni_grpc.wire import pb

logger = logging.getLogger(__name__)

# Bumped per command and per engine event as plain ints, read at scrape time (hot_metrics.py).
_HOT = metrics.HOT_COUNTS
# One append in this many (a session's first, then every this many) is timed for the histogram
# of the host's time per append: a sample tells the distribution as well (its quantiles are
# what the dashboard shows), without two clock reads and a bucket on every chunk.
APPEND_TIMING_EVERY = 16


class SessionHost:
    """Runs one session: core rules, engine, and the streams attached to it."""

    def __init__(
        self,
        session: Session,
        engine: EngineSession,
        on_ended: Callable[[Session], None],
        clock: Callable[[], float],
    ) -> None:
        self.session = session
        self.engine = engine
        self._on_ended = on_ended
        self._clock = clock
        self._queues: dict[int, SendQueue] = {}
        self._edge = AudioEdge(session.config)
        self._tasks = [asyncio.create_task(self._pump_loop())]
        self.ended = False
        # Why the session expires, should it: set by whoever expires it (for the metrics).
        self.expiry_reason = "idle_timeout"
        self._overflow_counted = False
        self._appends = 0  # appends received, for the timing sample (APPEND_TIMING_EVERY)
        # The observers, filed by the hooks each overrides (taps.py): empty, they cost nothing.
        self.taps = Taps()

    def tail_heard(self) -> bytes:
        """The audio the last commit flushed from the input resampler to the engine."""
        return self._edge.last_tail

    @property
    def queued_events(self) -> int:
        """Events waiting for the writers of this session's streams."""
        return sum(len(queue) for queue in self._queues.values())

    # -- streams ---------------------------------------------------------------------------

    def attach(self, generation: int) -> SendQueue:
        """Registers the send queue of a stream that now owns (or resumes) the session."""
        barrier = self.taps.send_barrier(self)
        queue = SendQueue(generation, self.session.admission.budget, barrier)
        self._queues[generation] = queue
        return queue

    def release(self, queue: SendQueue) -> None:
        """The stream of ``queue`` is gone: detach it if it still owned the session.

        A resumed stream that goes before its client said anything rolls the token rotation
        back in the core (the client may never have seen the new token).
        """
        if self._queues.get(queue.generation) is queue:
            del self._queues[queue.generation]
        queue.discard()
        if self.session.detach(queue.generation, self._clock()):
            logger.info(
                "session %s detached (generation %d)",
                self.session.id,
                queue.generation,
                extra={"session_id": self.session.id},
            )
        for tap in self.taps.released:
            tap.released(self, queue)

    # -- core calls ------------------------------------------------------------------------

    async def receive(self, generation: int, request: pb.ConverseRequest, size: int = 0) -> float:
        """Feeds one command into the core and carries out what it says (:meth:`receive_now`,
        awaited to the end)."""
        pending = self.receive_now(generation, request, size)
        # (mypy reads ``float`` as ``float | int``, so the type test narrows nothing for it)
        return pending if type(pending) is float else await cast(Awaitable[float], pending)

    def receive_now(
        self, generation: int, request: pb.ConverseRequest, size: int = 0
    ) -> float | Coroutine[Any, Any, float]:
        """Feeds one command into the core and carries out what it says, with no coroutine
        while the engine takes each command it admitted at once (the usual chunk).

        ``size`` is the command's length on the wire when the transport read it (0: the core
        measures it). A command the core admitted goes to the engine from here, in order.
        Returns how long the stream's reader takes nothing more: after a refusal for rate, the
        retry hint, so flow control pushes a flood back to its sender instead of the server
        spending a refusal on every message (0 otherwise, with no clock read). When a command
        must wait for the engine (its mailbox, or the edge's work), returns instead the
        coroutine that hands the rest on and then returns that: the caller awaits it before it
        reads its next command, so the engine still gets them in order.
        """
        kind = request.WhichOneof("command")
        _HOT.commands[kind] += 1
        session = self.session
        started = 0.0
        if kind == "append_input_audio":
            self._appends += 1
            if self._appends % APPEND_TIMING_EVERY == 1:
                started = perf_counter()  # host time, not the session clock
        now = self._clock()
        effects = session.receive(generation, request, now, kind, size)
        taps = self.taps
        if taps.admitted:
            for tap in taps.admitted:
                tap.admitted(self, generation, request, effects)
        if effects.sends or effects.end_streams or effects.ended:
            self.deliver(effects)
        commands = effects.engine
        for index, command in enumerate(commands):
            if self.ended:
                break
            if type(command) is AppendAudio and command.native:
                # The usual chunk: nothing to do at the edge, so no coroutine of its own.
                if self._hand_now(command, now):
                    continue
                return self._receive_rest(
                    generation, request, now, started, command, commands[index + 1 :]
                )
            return self._receive_rest(generation, request, now, started, None, commands[index:])
        if taps.handled or started or session.last_refusal or session.throttle.retry_at:
            return self._received(generation, request, started)
        return 0.0  # nothing follows (no tap, no sample, no refusal): no call for it

    async def _receive_rest(
        self,
        generation: int,
        request: pb.ConverseRequest,
        now: float,
        started: float,
        queued: EngineCommand | None,
        rest: Sequence[EngineCommand],
    ) -> float:
        """:meth:`receive_now`'s end when the engine does not take a command at once:
        ``queued`` (told to the taps already) goes to the engine's mailbox, then ``rest``."""
        if queued is not None:
            await self._hand(queued)
        for command in rest:
            if self.ended:
                break
            if type(command) is AppendAudio and command.native:
                if not self._hand_now(command, now):
                    await self._hand(command)
                continue
            await self._submit(command, now)
        return self._received(generation, request, started)

    def _received(self, generation: int, request: pb.ConverseRequest, started: float) -> float:
        """What follows a command's hand-over: the taps, the timing sample, the refusal count,
        and the reader's pause."""
        taps = self.taps
        if taps.handled:
            for tap in taps.handled:
                tap.handled(self, generation, request)
        if started:
            _HOT.append_handled(perf_counter() - started)
        session = self.session
        if session.last_refusal:
            # The codes are the core's own closed set, never client text.
            metrics.COMMAND_REFUSALS.labels(session.last_refusal).inc()
        retry_at = session.throttle.retry_at
        return retry_at - self._clock() if retry_at else 0.0

    async def replay(self, commands: Sequence[EngineCommand]) -> None:
        """An adopted session: the commands its lost owner admitted and its engine had not
        applied (the uncommitted input among them) go into the fresh engine, in the client's
        order, as the reader hands them, before any new command. The stored number covers
        them, so the client never sends them again (see ``DurableTap.take_replay``)."""
        now = self._clock()
        for command in commands:
            if self.ended:
                break
            await self._submit(command, now)

    def go_away(self, time_left_s: float, reason: str) -> None:
        """Tells the attached stream that the server stops in ``time_left_s`` (a drain)."""
        self.deliver(self.session.going_away(time_left_s, reason))

    def moved(self) -> None:
        """Ends the attached streams with going_away (``session_moved``): a peer holds the
        session now, and the client resumes there."""
        notice = pb.ConverseResponse(going_away=pb.GoingAway(reason="session_moved"))
        notice.going_away.time_left.FromMilliseconds(0)
        for queue in self._queues.values():
            queue.move(notice.SerializeToString())

    def refuse(self, generation: int, error: CommandError) -> None:
        """Answers a message that is not a command at all with a typed error."""
        self.deliver(self.session.refuse(generation, error, self._clock()))

    def deliver(self, effects: Effects) -> None:
        """Carries out the synchronous part of effects: sends, stream ends, the ending."""
        for generation, payload in effects.sends:
            queue = self._queues.get(generation)
            if queue is not None and not queue.put(payload):
                # A stream that does not read is cut; the journal keeps its events for a resume.
                logger.warning(
                    "session %s: stream %d too slow, dropping it",
                    self.session.id,
                    generation,
                    extra={"session_id": self.session.id},
                )
                queue.fall_behind()
                self.session.detach(generation, self._clock())
        for generation, reason in effects.end_streams:
            queue = self._queues.get(generation)
            if queue is not None:
                queue.end(reason)
        if self.session.journal.overflowed and not self._overflow_counted:
            self._overflow_counted = True
            metrics.JOURNAL_OVERFLOWS.inc()
        if self.taps.delivered:
            for tap in self.taps.delivered:
                tap.delivered(self, effects)
        if effects.ended and not self.ended:
            self.ended = True
            metrics.session_ended(self.session, self.expiry_reason)
            for tap in self.taps.ended:
                tap.ended(self)
            self._on_ended(self.session)
            asyncio.get_running_loop().create_task(self._shut_engine())

    # -- engine ----------------------------------------------------------------------------

    async def _submit(self, command: EngineCommand, now: float) -> None:
        """Hands one admitted command to the engine, its audio in a form the engine takes.

        Called from the stream's reader, in command order: when the engine falls behind, its
        full mailbox stops the reader, and gRPC flow control pushes back on the client. What
        the engine makes at once is published at ``now``, the command's time.
        """
        match command:
            case AppendAudio(native=False):  # native appends (the usual) go as they came
                converted = self._edge.engine_input(command)
                if converted is None:
                    self.session.admission.input_taken()  # what the core held goes back
                    self._answer(command, CommandError("bad_audio", "the audio cannot be decoded"))
                    return
                command = converted
            case CommitAudio():
                if tail := self._edge.input_tail(command):
                    for tap in self.taps.handed:
                        tap.handed(self, tail)
                    self._reader_waits()
                    await self.engine.submit(tail)
            case CreateItem(item=item) if any(part.audio for part in item.content):
                decoded = self._edge.item_input(command)
                if decoded is None:
                    self._answer(command, CommandError("bad_audio", "the audio cannot be decoded"))
                    return
                command = decoded
            case ClearAudio() | CancelInput():
                self._edge.drop_input()
            case UpdateSession():
                self._edge.configure(self.session.config)  # the formats may have changed
                for tap in self.taps.configured:
                    tap.configured(self)
        if not self._hand_now(command, now):
            await self._hand(command)

    def _hand_now(self, command: EngineCommand, now: float) -> bool:
        """Tells the taps, then hands ``command`` (as the engine takes it) to the engine's fast
        path: a cheap command the engine applies at once, its events published here at
        ``now``, with no mailbox and no pump between. False: the engine queues it instead
        (:meth:`_hand`)."""
        if self.taps.handed:
            for tap in self.taps.handed:
                tap.handed(self, command)
        try:
            made = self.engine.submit_now(command)
            if made is None:
                return False
            for event in made:
                self._engine_event(event, now)
        except Exception:
            self._engine_failed("engine refused a command")
        return True

    async def _hand(self, command: EngineCommand) -> None:
        """Puts ``command`` in the engine's mailbox (it waits while the mailbox is full)."""
        self._reader_waits()
        try:
            await self.engine.submit(command)
        except Exception:
            self._engine_failed("engine refused a command")

    def _reader_waits(self) -> None:
        """The stream's reader may wait now (for room in the engine's mailbox): what it queued
        goes to the writer task meanwhile, not held for its flush (``SendQueue.flush``)."""
        for queue in self._queues.values():
            if queue.reader_flushes:
                queue.reader_done()

    def _engine_failed(self, what: str) -> None:
        """The engine raised (on a command, or giving its output): logged with ``what``, and
        the session expires (engine_failure)."""
        logger.exception(
            "session %s: %s", self.session.id, what, extra={"session_id": self.session.id}
        )
        self.expiry_reason = "engine_failure"
        self.deliver(self.session.expire(pb.EXPIRY_REASON_ENGINE_FAILURE, self._clock()))

    def _answer(self, command: EngineCommand, error: CommandError) -> None:
        """Refuses an append the core admitted but the host cannot take, with an error event."""
        metrics.COMMAND_REFUSALS.labels(error.code).inc()
        body = error.to_error(client_seq=command.client_seq, event_id=command.event_id)
        self.deliver(self.session.publish(pb.ConverseResponse(error=body), self._clock()))

    async def _pump_loop(self) -> None:
        try:
            async for event in self.engine.events():
                self._engine_event(event)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._engine_failed("engine output failed")

    def _engine_event(self, event: pb.ConverseResponse, now: float | None = None) -> None:
        """Publishes one engine event (from the pump, or made at once by ``submit_now`` at
        ``now``, the command's time)."""
        kind = event.WhichOneof("event")
        taps = self.taps
        if kind is None:  # a marker: the engine applied a command (report_applied), unpublished
            for tap in taps.applied:
                tap.applied(self, event.applied_client_seq)
            return
        _HOT.events[kind] += 1
        if kind == "output_audio_delta" and not self._edge.session_output(event.output_audio_delta):
            return  # its audio is all still in the resampler: the next delta carries it
        if kind == "item_retrieved":
            self._edge.item_output(event.item_retrieved.item)  # the audio as the client sent it
        if taps.all_events:
            for tap in taps.all_events:
                tap.event(self, kind, event)
        if kind in taps.watchers:
            for tap in taps.watchers[kind]:
                tap.event(self, kind, event)
        if taps.held_back and kind in taps.held_back:
            taps.held_back.discard(kind)  # told already, before an adoption (taps.py)
            return
        if now is None:
            now = self._clock()
        if kind in OUTPUT_ENDING_EVENTS and (tail := self._edge.output_tail(kind, event)):
            self.deliver(self.session.publish(tail, now))  # the response's last audio
        self.deliver(self.session.publish(event, now, kind))

    async def abandon(self) -> None:
        """Stops the session's tasks and engine without any event (server shutdown)."""
        for task in self._tasks:
            task.cancel()
        for tap in self.taps.ended:
            tap.ended(self)
        with contextlib.suppress(Exception):
            await self.engine.close()

    async def _shut_engine(self) -> None:
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        with contextlib.suppress(Exception):
            await self.engine.close()
        logger.info(
            "session %s ended (%s)",
            self.session.id,
            self.session.state.name,
            extra={"session_id": self.session.id},
        )


__all__ = ["SendQueue", "SessionHost"]
