"""Recording on the event loop: which sessions are recorded, and what is handed to the writer.

A :class:`Recorder` serves one server. When a session starts under a policy that records it
(:func:`omni_grpc.core.config.resolve_recording` says so in its configuration in force), a
:class:`Recording` registers as a tap of the session's host (:mod:`omni_grpc.server.taps`):
it is told of each command the core decided on, of each command as the engine took it, of
each carrying out of effects, and of a stream's release. An unrecorded session has no such tap
and pays nothing. A command is handed over once its handling ended: an append's audio is the
one the engine received (the typed command the edge handed on), its skip what the core decided
(``Session.last_skip``), a commit's resampler tail the host's ``tail_heard``, and the events it
made follow it. ``RecordOnRequest`` starts or stops a recording as the configuration changes.

What the tap sees goes, as tuples, into one list per server, handed to the writer thread
(:mod:`.writer`) every :data:`BATCH_S`, which appends it to the part's wire log as it is
(:mod:`.part`): a reference to a payload the core already made (an event's journaled bytes), a
command's serialized bytes, and the audio the engine received where it is not the audio sent
(an append the edge converted, a commit's resampler tail). Nothing is formatted per chunk. Events
are taken from the session's journal, so each numbered event is recorded once, in order, even
those made while no stream was attached; events of one stream (seq 0) come from the sends.

The buffer is bounded: a recording whose writes fall :data:`RECORDING_BUFFER_BYTES` behind (or
when all together fall :data:`TOTAL_BUFFER_BYTES` behind) is stopped, ``too_slow``, with a log
line and the metric; its session never waits for a disk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_grpc.core import Effects, State
from omni_grpc.core.commands import AppendAudio, EngineCommand
from omni_grpc.core.limits import EngineFeatures
from omni_grpc.server.recording.counters import STARTED, STOPPED
from omni_grpc.server.recording.part import PartInfo, session_fields, without_frames
from omni_grpc.server.recording.retention import RETENTION_EVERY_S, over_cap, sweep
from omni_grpc.server.recording.settings import RecordSettings
from omni_grpc.server.recording.state import RecordingState
from omni_grpc.server.recording.writer import (
    APPEND,
    CLOSE,
    COMMAND,
    EVENT,
    FAIL,
    NOTE,
    OPEN,
    STREAM,
    Writer,
)
from omni_grpc.server.send_queue import SendQueue
from omni_grpc.server.taps import HostTap
from omni_grpc.server.taps import SessionHost as TappedHost
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ

if TYPE_CHECKING:
    from omni_grpc.server.host import SessionHost

logger = logging.getLogger(__name__)

# How long records wait on the loop before they go to the writer thread together: the thread
# wakes (and takes the GIL) less often, and writes a few hundred milliseconds per file at once;
# a crash loses at most the batch not yet handed over.
BATCH_S = 0.25
RECORDING_BUFFER_BYTES = 16 * 1024 * 1024
TOTAL_BUFFER_BYTES = 256 * 1024 * 1024
_NUMBERED = b"\x08"  # a numbered event's bytes start with field 1 (seq), which is never 0


# A command being handled, as the recording saw it when the core had decided on it:
# (time, generation, request, skip). A tuple: built on every chunk of a recorded session.
_Pending = tuple[float, int, pb.ConverseRequest, str]


class Recording(RecordingState, HostTap):
    """One session's recording on the event loop (and, in what it shares with the writer
    thread, :class:`~.state.RecordingState`, its writer's side): a tap of its session host."""

    def __init__(self, recorder: Recorder, host: SessionHost, first_seq: int) -> None:
        super().__init__(host.session.id)
        self.recorder = recorder
        self.last_seq = first_seq - 1  # the last journaled event handed over
        self.queued = 0  # bytes handed over (the loop counts)
        self._host = host
        self.receiving = 0  # commands being handled now (their events wait for them)
        # Why the recording is to end once no command is being handled ("" while it goes on).
        self.closing = ""
        self._unnumbered: list[tuple[float, int, bytes]] = []  # sends of one stream, waiting
        self._command: _Pending | None = None  # the command being handled
        # What the engine took of it first: for an append, the append as the engine heard it
        # (the only one read).
        self._heard: AppendAudio | None = None

    def put(self, *records: tuple[Any, ...]) -> None:
        """Hands records over; stops the recording when its buffer is full."""
        if self.failed:
            return
        size = 0
        for record in records:
            size += record[2]
        self.queued += size
        recorder = self.recorder
        recorder.queued += size
        if (
            self.queued - self.done > RECORDING_BUFFER_BYTES
            or recorder.queued - recorder.done > TOTAL_BUFFER_BYTES
        ):
            recorder.too_slow(self)
            return
        recorder.batch.extend(records)
        if recorder.timer is None:
            recorder.timer = recorder.loop.call_later(BATCH_S, recorder.hand_over)

    # -- the tap ---------------------------------------------------------------------------

    def install(self) -> None:
        """Registers the recording as one of the host's taps."""
        self._host.taps.add(self)

    def uninstall(self) -> None:
        """Takes the tap off the host."""
        self._host.taps.remove(self)

    def admitted(
        self, host: TappedHost, generation: int, request: pb.ConverseRequest, effects: Effects
    ) -> None:
        # The command's line is written once it is handled (its events follow it); what the
        # core decided of it is read now, before anything else changes the session.
        self.receiving += 1
        self._command = (self.recorder.clock(), generation, request, host.session.last_skip)
        self._heard = None

    def handed(self, host: TappedHost, command: EngineCommand) -> None:
        # The first command the engine took of it: an append's own (a commit's resampler tail,
        # handed too, is recorded as the host's tail_heard with the commit's line instead).
        if self._heard is None:
            self._heard = command  # type: ignore[assignment]  # read for an append only

    def handled(self, host: TappedHost, generation: int, request: pb.ConverseRequest) -> None:
        pending, self._command = self._command, None
        if pending is None or pending[2] is not request:
            return  # the recording began while this command was being handled
        self.receiving -= 1
        t, _, _, skip = pending
        heard, self._heard = self._heard, None
        record: tuple[Any, ...]
        if request.HasField("append_input_audio"):  # the usual command: no call made for it
            append = request.append_input_audio
            if append.video_frames:
                request = without_frames(request)
            body = request.SerializeToString()
            if heard is None:  # skipped or refused: the engine heard nothing of it
                record = (APPEND, self, len(body), t, generation, skip, body, None, 0, 0, False)
            else:  # the audio the engine heard is kept apart only when it is not the one sent
                audio = heard.audio
                as_sent = audio == append.audio
                size = len(body) if as_sent else len(body) + len(audio)
                record = (APPEND, self, size, t, generation, skip, body, audio,
                          heard.encoding, heard.rate_hz, as_sent)  # fmt: skip
        else:
            body = request.SerializeToString()
            tail = host.tail_heard() if request.HasField("commit_input_audio") else b""
            record = (COMMAND, self, len(body), t, generation, body, skip, tail)
        # What the command made follows it: the usual chunk's one event read at once.
        journal = self._host.session.journal
        newest = journal.newest() if journal.next_seq == self.last_seq + 2 else None
        if newest is not None and newest[0] == journal.next_seq - 1 and not self._unnumbered:
            self.last_seq = newest[0]
            self.put(record, (EVENT, self, len(newest[2]), *newest))
        else:
            self.put(record)
            self._events(())
        if self.closing and not self.receiving:
            self.recorder.finish(self._host, self.closing)

    def delivered(self, host: TappedHost, effects: Effects) -> None:
        if self.receiving:  # the command's events follow its line: only keep these
            for generation, payload in effects.sends:
                if payload[:1] != _NUMBERED:
                    self._unnumbered.append((self.recorder.clock(), generation, payload))
        else:
            self._events(effects.sends)
        if effects.ended:
            self.close_after("ended")

    def released(self, host: TappedHost, queue: SendQueue) -> None:
        if host.session.state is State.DETACHED:
            generation = {"generation": queue.generation}
            self.put((NOTE, self, 0, self.recorder.clock(), "detached", generation))

    def close_after(self, reason: str) -> None:
        """Ends the recording for ``reason``, after the command being handled, if one is (so
        that its line and its events come before the end)."""
        self.closing = self.closing or reason
        if not self.receiving:
            self.recorder.finish(self._host, self.closing)

    def _events(self, sends: Iterable[tuple[int, bytes]]) -> None:
        """Hands over every event journaled since the last call, and the sends of one stream
        (while a command is being handled, these wait for its line: they follow it)."""
        for generation, payload in sends:
            if payload[:1] != _NUMBERED:
                self._unnumbered.append((self.recorder.clock(), generation, payload))
        journal = self._host.session.journal
        if journal.next_seq > self.last_seq + 1:
            for seq, at, payload in journal.newest_after(self.last_seq):
                self.put((EVENT, self, len(payload), seq, at, payload))
            self.last_seq = journal.next_seq - 1
        if self._unnumbered:
            for at, generation, payload in self._unnumbered:
                self.put((STREAM, self, len(payload), at, generation, payload))
            self._unnumbered.clear()


class Recorder:
    """Every recording of one server, the writer thread, and the retention sweep."""

    def __init__(
        self,
        settings: RecordSettings,
        clock: Callable[[], float],
        engine: EngineFeatures,
        engine_options: dict[str, str],
        replica: str,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self._engine = engine
        self.replica = replica  # this server's name in the manifest (its route, or host:port)
        self._session_fields = session_fields(settings, engine, engine_options)
        self.batch: list[tuple[Any, ...]] = []
        self.timer: asyncio.TimerHandle | None = None
        self.queued = 0
        self.done = 0
        self._recordings: dict[str, Recording] = {}
        self._writer = Writer()
        self._tasks: list[asyncio.Task[None]] = []
        self.loop = asyncio.get_running_loop()

    @property
    def folder(self) -> Path:
        return self.settings.folder

    def live(self) -> set[str]:
        """The sessions this server records now (the sweep leaves their folders alone)."""
        return set(self._recordings)

    async def start(self) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._writer.start()
        self._tasks.append(asyncio.create_task(self._keep_sweeping()))

    async def stop(self) -> None:
        """Ends every recording (``server_stopped``), writes what is left, stops the thread."""
        for task in self._tasks:
            task.cancel()
        for recording in list(self._recordings.values()):
            self._end(recording, "server_stopped")
        self.hand_over()
        await asyncio.to_thread(self._writer.stop)

    # -- sessions start and end ------------------------------------------------------------

    def consider(self, host: SessionHost, *, started_by: str = "open", part: int = 1) -> None:
        """Starts recording ``host``'s session if its configuration in force says so."""
        session = host.session
        if session.id in self._recordings or not session.config.recording.enabled:
            return
        adopted = started_by == "adopted"
        first_seq = session.journal.head + 1
        # An adopted session's recording starts with what the store kept of its journal.
        kept_from = session.journal.dropped_through + 1 if adopted else first_seq
        recording = Recording(self, host, kept_from)
        wanted = session.config.recording
        info = PartInfo(
            session_id=session.id,
            part=part,
            replica=self.replica,
            folder=self.folder / session.id,
            t0=self.clock(),
            wall=datetime.now(UTC).isoformat(timespec="milliseconds"),
            rate_hz=self._track_rate(session.config),
            omit_audio=self.settings.omit_audio or wanted.omit_audio,
            omit_text=self.settings.omit_text or wanted.omit_text,
            session=self._session_fields,
            started_by=started_by,
            first_seq=first_seq,
        )
        self._recordings[session.id] = recording
        recording.put((OPEN, recording, 0, info))
        self.hand_over()  # at once: a replica that dies now still leaves its part's manifest
        if adopted:  # what the store kept, in case the replica before could not write it
            for seq, at, payload in session.journal.newest_after(recording.last_seq):
                recording.put((EVENT, recording, len(payload), seq, at, payload, True))
            recording.last_seq = session.journal.head
        recording.install()
        STARTED.inc()

    def reconsider(self, host: SessionHost) -> None:
        """The session's configuration changed: recording starts or stops as it now says."""
        recording = self._recordings.get(host.session.id)
        if recording is None:
            self.consider(host, started_by="asked")
        elif not host.session.config.recording.enabled:
            recording.close_after("not_asked")

    def finish(self, host: SessionHost, reason: str) -> None:
        """The session's recording ends here: it ended, moved, or stopped being asked for."""
        recording = self._recordings.get(host.session.id)
        if recording is not None and recording._host is host:
            self._end(recording, reason)

    def _end(self, recording: Recording, reason: str) -> None:
        del self._recordings[recording.session_id]
        recording.uninstall()
        recording.put((CLOSE, recording, 0, self.clock(), reason))

    def too_slow(self, recording: Recording) -> None:
        """The writer fell too far behind this recording: it stops; its session goes on."""
        self._stop(recording, "too_slow", "the disk fell behind")

    def _stop(self, recording: Recording, reason: str, why: str) -> None:
        """Stops ``recording`` before its session ends (its manifest says ``reason``)."""
        recording.failed = True
        self._recordings.pop(recording.session_id, None)
        recording.uninstall()
        STOPPED.labels(reason).inc()
        logger.warning(
            "session %s: recording stopped (%s: %s); the session goes on",
            recording.session_id,
            reason,
            why,
            extra={"session_id": recording.session_id},
        )
        self.batch.append((FAIL, recording, 0, self.clock(), reason))

    def hand_over(self) -> None:
        """Gives the records collected so far to the writer thread."""
        self.timer = None
        if self.batch:
            batch, self.batch = self.batch, []
            self._writer.put(self.clock(), batch)

    def _track_rate(self, config: pb.SessionConfig) -> int:
        """The rate the engine hears the session's input at: the WAV's rate."""
        fmt = config.input_audio_format
        native = self._engine.native_input_rates_hz
        if fmt.encoding == pb.AUDIO_ENCODING_PCM16 and fmt.sample_rate_hz in native:
            return fmt.sample_rate_hz
        return CANONICAL_INPUT_RATE_HZ

    async def _keep_sweeping(self) -> None:
        settings = self.settings
        while True:
            cap = settings.max_total_bytes
            try:
                await asyncio.to_thread(sweep, self.folder, settings.max_age_s, cap, self.live())
                over = await asyncio.to_thread(over_cap, self.folder, cap, self.live())
            except OSError as error:
                logger.warning("recordings: the retention sweep failed: %s", error)
                over = []
            for session_id in over:
                if (recording := self._recordings.get(session_id)) is not None:
                    self._stop(recording, "max_total_bytes", "the recordings passed their cap")
            if over:
                self.hand_over()
            await asyncio.sleep(RETENTION_EVERY_S)


class RecordOnRequest(HostTap):
    """A session recorded on request: its recording starts or stops with its configuration."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def configured(self, host: TappedHost) -> None:
        self._recorder.reconsider(host)  # type: ignore[arg-type]  # the host that tells it


__all__ = ["BATCH_S", "RecordOnRequest", "Recorder", "Recording"]
