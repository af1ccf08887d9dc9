"""The asyncio side of one session: the core session, its engine session, and its streams.

A :class:`SessionHost` is the only thing that calls into a core :class:`Session`, always from
the event loop thread, so the core needs no locks. It carries out the core's effects: payloads
go to the bounded send queue of the stream they are for, engine commands go to the engine in
order from the stream's reader, and an engine pump feeds engine output back into the core. It
reads the server's one clock (see :mod:`omni_grpc.server.sessions`). Input audio
is turned into a form the engine takes on the way in (untouched when it is already native to
it), and output audio into the session's format on the way out, so neither the core nor the
engines ever see another format.

A recorded session's host (:mod:`omni_grpc.server.recording`) has its ``receive``, ``deliver``
and ``release`` wrapped on the instance, so that a host that is not recorded pays nothing for
recording.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from time import perf_counter

from omni_grpc.core import Effects, Session
from omni_grpc.core.admission import (
    INPUT_ENDING_COMMANDS,
    INPUT_TAKEN_EVENTS,
    Admitted,
    client_commits,
    held_bytes,
)
from omni_grpc.core.errors import CommandError
from omni_grpc.engine.base import EngineSession
from omni_grpc.server import fault_hook, metrics
from omni_grpc.server.durable import DurableStore, ItemLog
from omni_grpc.server.edge import OUTPUT_ENDING_EVENTS, AudioEdge
from omni_grpc.server.replay_log import ReplayLog, replay_order
from omni_grpc.server.send_queue import SendQueue
from omni_grpc.server.tracing import TurnTraces
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
        turns: TurnTraces | None = None,
        store: DurableStore | None = None,
        *,
        adopted: bool = False,
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
        # When the engine last said the user stopped speaking, until the first audio after it.
        self._speech_ended_at: float | None = None
        # The session's turns as spans; None when tracing is off (one check per message).
        self._turns = turns
        if turns is not None:
            engine.on_stage = turns.stage
        # Durability: the store writes the session behind each event; the items it keeps are
        # what an adopting peer gives its fresh engine session as the history, and the replay
        # log what it replays into it (the uncommitted input, the commands not yet applied).
        self.store = store
        self.replay: ReplayLog | None = None
        self.items: ItemLog | None = None
        if store is not None:
            self.replay = ReplayLog(session.admission.max_pending_input_bytes)
            self.items = ItemLog(self.replay)
            engine.report_applied = True
        # Server VAD: a speech_started the replay makes again after an adoption, which the
        # client was told already (see replay_stored); None: nothing to drop.
        self._speech_told_through: int | None = None
        self._faults = fault_hook.armed(adopted)
        # Told after each update_session the core applied (recording on request starts or
        # stops with the configuration); None when no one asks.
        self.on_config: Callable[[SessionHost], None] | None = None

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
        barrier = self._settled if self.store is not None and self.store.mode == "sync" else None
        queue = SendQueue(generation, self.session.admission.budget, barrier)
        self._queues[generation] = queue
        return queue

    async def _settled(self) -> None:
        if self.store is not None:
            await self.store.settled(self.session)

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

    # -- core calls ------------------------------------------------------------------------

    async def receive(self, generation: int, request: pb.ConverseRequest, size: int = 0) -> float:
        """Feeds one command into the core and carries out what it says.

        ``size`` is the command's length on the wire when the transport read it (0: the core
        measures it). A command the core admitted goes to the engine from here, in order.
        Returns how long the stream's reader takes nothing more: after a refusal for rate, the
        retry hint, so flow control pushes a flood back to its sender instead of the server
        spending a refusal on every message (0 otherwise, with no clock read).
        """
        kind = request.WhichOneof("command")
        _HOT.commands[kind] += 1
        if self._turns is not None:
            self._turns.command(request)
        session = self.session
        started = 0.0
        if kind == "append_input_audio":
            self._appends += 1
            if self._appends % APPEND_TIMING_EVERY == 1:
                started = perf_counter()  # host time, not the session clock
        now = self._clock()
        effects = session.receive(generation, request, now, kind, size)
        if self.replay is not None:
            for admitted in effects.engine:  # in the same round as the number that covers it
                self._keep_for_replay(admitted)
        if effects.sends or effects.end_streams or effects.ended:
            self.deliver(effects)
        elif self.store is not None and self.items is not None:
            self.store.mark(session, self.items)  # the command's number is the session's now
        for admitted in effects.engine:
            if self.ended:
                break
            await self._submit(admitted, now)
        if self._faults is not None and effects.engine and self._faults.command(kind):
            self._die_written()
        if started:
            _HOT.append_handled(perf_counter() - started)
        if session.last_refusal:
            # The codes are the core's own closed set, never client text.
            metrics.COMMAND_REFUSALS.labels(session.last_refusal).inc()
        retry_at = session.throttle.retry_at
        return retry_at - self._clock() if retry_at else 0.0

    def _keep_for_replay(self, admitted: Admitted) -> None:
        assert self.replay is not None
        if admitted.kind == "append_input_audio":
            # Its format resolved in the request, as the edge would: stored as it came.
            append = admitted.request.append_input_audio
            append.encoding, append.sample_rate_hz = admitted.encoding, admitted.rate_hz
            vad = not client_commits(self.session.config)
            self.replay.appended(admitted.request, held_bytes(admitted), vad=vad)
        else:
            self.replay.submitted(admitted.kind, admitted.request)

    async def replay_stored(
        self, appends: list[bytes], commands: list[bytes], *, response_cut: bool = False
    ) -> None:
        """An adopted session: its uncommitted input and the commands its lost owner had not
        applied go into the fresh engine, in the client's order, before any new command.
        A ``cancel_response`` is not replayed when the adoption cut the response it was for
        (``response_cut``): the cut ended it, and the fresh engine would refuse it.

        Server VAD: the client may have been told ``speech_started`` for the turn in progress
        already (the stored journal's last word on speech); the fresh detector hearing the same
        audio says it again, and that one is dropped, so no event is doubled and no audio lost.
        """
        requests = replay_order(appends, commands)
        if not requests:
            return
        if self._speech_in_progress():
            self._speech_told_through = requests[-1].client_seq
        now = self._clock()
        for request in requests:
            admitted = self.session.admission.readmit(request)
            if response_cut and admitted.kind == "cancel_response":
                continue
            self._keep_for_replay(admitted)
            await self._submit(admitted, now)
        if self.store is not None and self.items is not None:
            self.store.mark(self.session, self.items)

    def _speech_in_progress(self) -> bool:
        """Whether the journal's last speech event is a speech_started (a turn under way)."""
        journal = self.session.journal
        for _, payload in reversed(journal.entries_after(journal.dropped_through)):
            kind = pb.ConverseResponse.FromString(payload).WhichOneof("event")
            if kind == "speech_started":
                return True
            if kind in ("speech_stopped", "input_committed", "input_cleared"):
                return False
        return False

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
        if self.store is not None and self.items is not None and not effects.ended:
            self.store.mark(self.session, self.items)
        if effects.ended and not self.ended:
            self.ended = True
            metrics.session_ended(self.session, self.expiry_reason)
            if self._turns is not None:
                self._turns.close()
            self._on_ended(self.session)
            asyncio.get_running_loop().create_task(self._shut_engine())

    # -- engine ----------------------------------------------------------------------------

    async def _submit(self, admitted: Admitted, now: float) -> None:
        """Hands one admitted command to the engine, its audio in a form the engine takes.

        Called from the stream's reader, in command order: when the engine falls behind, its
        full mailbox stops the reader, and gRPC flow control pushes back on the client. What
        the engine makes at once is published at ``now``, the command's time.
        """
        request, kind = admitted.request, admitted.kind
        if kind == "append_input_audio":  # the usual command first
            if not self._edge.engine_input(admitted):
                self.session.admission.input_taken()  # what the core held for it goes back
                if self.replay is not None:
                    self.replay.refused(request.client_seq)
                self._answer(request, CommandError("bad_audio", "the audio cannot be decoded"))
                return
        elif kind in INPUT_ENDING_COMMANDS:
            if kind == "commit_input_audio":
                if tail := self._edge.input_tail(request):
                    await self.engine.submit(tail)
            else:  # clear_input_audio, cancel_input
                self._edge.drop_input()
        elif kind == "update_session":
            self._edge.configure(self.session.config)  # the formats may have changed
            if self.on_config is not None:
                self.on_config(self)
        try:
            # The fast path: a cheap command the engine applies at once, its events published
            # here, with no mailbox and no pump between (None: the engine queues it).
            made = self.engine.submit_now(request, kind)
            if made is None:
                await self.engine.submit(request)
            else:
                for event in made:
                    self._engine_event(event, now)
                if self.replay is not None:
                    self.replay.applied(request.client_seq)
        except Exception:
            logger.exception(
                "session %s: engine refused a command",
                self.session.id,
                extra={"session_id": self.session.id},
            )
            self.expiry_reason = "engine_failure"
            self.deliver(self.session.expire(pb.EXPIRY_REASON_ENGINE_FAILURE, self._clock()))

    def _answer(self, request: pb.ConverseRequest, error: CommandError) -> None:
        """Refuses an append the core admitted but the host cannot take, with an error event."""
        metrics.COMMAND_REFUSALS.labels(error.code).inc()
        body = error.to_error(client_seq=request.client_seq, event_id=request.event_id)
        self.deliver(self.session.publish(pb.ConverseResponse(error=body), self._clock()))

    async def _pump_loop(self) -> None:
        try:
            async for event in self.engine.events():
                self._engine_event(event)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception(
                "session %s: engine output failed",
                self.session.id,
                extra={"session_id": self.session.id},
            )
            self.expiry_reason = "engine_failure"
            self.deliver(self.session.expire(pb.EXPIRY_REASON_ENGINE_FAILURE, self._clock()))

    def _engine_event(self, event: pb.ConverseResponse, now: float | None = None) -> None:
        """Publishes one engine event (from the pump, or made at once by ``submit_now`` at
        ``now``, the command's time)."""
        kind = event.WhichOneof("event")
        if kind is None:  # the engine applied a command (EngineSession.report_applied)
            self._applied(event.applied_client_seq)
            return
        _HOT.events[kind] += 1
        if kind == "output_audio_delta":
            if not self._edge.session_output(event.output_audio_delta):
                return  # its audio is all still in the resampler: the next delta carries it
            if self._speech_ended_at is not None:
                metrics.SPEECH_END_TO_AUDIO.observe(perf_counter() - self._speech_ended_at)
                self._speech_ended_at = None
        elif kind == "response_done":
            metrics.response_done(event)  # its latencies, into the histograms
        elif kind == "speech_stopped":
            self._speech_ended_at = perf_counter()
        if self._turns is not None:
            self._turns.event(kind, event)
        if now is None:
            now = self._clock()
        if kind in OUTPUT_ENDING_EVENTS and (tail := self._edge.output_tail(kind, event)):
            self.deliver(self.session.publish(tail, now))  # the response's last audio
        if self.replay is not None:
            if kind in INPUT_TAKEN_EVENTS:
                self.replay.input_taken()
            elif kind == "speech_started":
                self.replay.speaking = True
                if self._speech_told_through is not None:
                    self._speech_told_through = None
                    return  # told before the adoption (see replay_stored)
        if self.items is not None:
            self.items.observe(kind, event)
        self.deliver(self.session.publish(event, now, kind))
        if self._faults is not None and self._faults.event(kind):
            self._die_written()

    def _die_written(self) -> None:
        """The test hook's moment (:mod:`.fault_hook`): this replica dies once it is stored."""

        def mark() -> None:
            if self.store is not None and self.items is not None:
                self.store.mark(self.session, self.items)

        self._tasks.append(asyncio.create_task(fault_hook.die_written(self.store, mark)))

    def _applied(self, seq: int) -> None:
        if self.replay is None:
            return
        self.replay.applied(seq)
        told = self._speech_told_through
        if told is not None and seq >= told:
            self._speech_told_through = None  # the replay is done: later speech is new
        if self.store is not None and self.items is not None:
            self.store.mark(self.session, self.items)

    async def abandon(self) -> None:
        """Stops the session's tasks and engine without any event (server shutdown)."""
        for task in self._tasks:
            task.cancel()
        if self._turns is not None:
            self._turns.close()
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
