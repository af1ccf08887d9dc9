"""Taps: the one way to observe a session host, and the observers the server registers.

A :class:`HostTap` is told what the host does: a command the core decided on (``admitted``,
with the effects the core returned: read ``session.last_skip`` and ``session.last_refusal``
for what became of it), each command as the engine took it (``handed``: an append's audio as
the engine heard it, a commit's resampler tail as an append of its own), the command's end
(``handled``), each engine event before it is published (``event``), each command the engine
says it applied (``applied``: a durable server asks for its markers), each carrying out of
effects (``delivered``), a stream gone (``released``), the configuration changed by the client
(``configured``), and the end of the host (``ended``: the session ended, or the host was
abandoned at a shutdown or a hand-over). The rules held here:

* **Registered, never wrapped.** Observers register with ``host.taps.add`` and come off with
  ``host.taps.remove`` (:class:`Taps`); nothing replaces a method of the host.
* **What is not asked for costs nothing.** A tap overrides only the methods it needs; the host
  files it under those alone, and an engine event goes only to the taps whose :attr:`events`
  name its kind (None: every kind). With no tap, the host's per-chunk path is what it was: a
  truth test of an empty tuple where it used to test an attribute for None.
* **Observers read what the core decided.** A tap never decides again whether a command was a
  repeat or refused; it reads the session (``last_skip``, ``last_refusal``).

The observers here are the server's own small ones: :class:`TurnMetrics` (the latency from the
end of speech to the first audio, and each response's latencies into the histograms) and
:class:`DurableTap` (the store written behind the session, and the items an adopting peer
restores). Tracing (:class:`~omni_grpc.server.tracing.TurnTraces`) and recording
(:class:`~omni_grpc.server.recording.recorder.Recording`) are taps of their own modules.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import ClassVar, Protocol, TypeVar

from omni_grpc.core import Effects, Session
from omni_grpc.core.admission import INPUT_TAKEN_EVENTS, client_commits, held_bytes
from omni_grpc.core.commands import (
    AppendAudio,
    CancelResponse,
    EngineCommand,
    UpdateSession,
    kind_of,
)
from omni_grpc.engine.base import EngineSession
from omni_grpc.server import metrics
from omni_grpc.server.durable import DurableStore, ItemLog
from omni_grpc.server.replay_log import ReplayLog, replay_order, speech_in_progress
from omni_grpc.server.send_queue import SendQueue
from omni_grpc.wire import pb

# The hooks a tap may override, each filed apart on the host (see SessionHost.add_tap).
HOOKS = (
    "admitted",
    "handed",
    "handled",
    "event",
    "applied",
    "delivered",
    "released",
    "configured",
    "ended",
)


class SessionHost(Protocol):
    """What a tap may read and ask of the host that tells it (``omni_grpc.server.host``)."""

    session: Session
    engine: EngineSession
    taps: Taps

    def tail_heard(self) -> bytes: ...


class HostTap:
    """An observer of one session host; every hook does nothing unless overridden."""

    __slots__ = ()

    # The engine event kinds ``event`` is told of; None: all of them.
    events: ClassVar[frozenset[str] | None] = None

    def admitted(
        self, host: SessionHost, generation: int, request: pb.ConverseRequest, effects: Effects
    ) -> None:
        """The core took a command from the stream of ``generation``: ``effects`` is what it
        said (told before the effects are carried out)."""

    def handed(self, host: SessionHost, command: EngineCommand) -> None:
        """The engine took ``command`` in the form it got it."""

    def handled(self, host: SessionHost, generation: int, request: pb.ConverseRequest) -> None:
        """The command's handling ended: the engine has what it was to get of it."""

    def event(self, host: SessionHost, kind: str | None, event: pb.ConverseResponse) -> None:
        """An engine event of a kind in :attr:`events`, about to be published."""

    def applied(self, host: SessionHost, client_seq: int) -> None:
        """The engine applied the command numbered ``client_seq``, its events published
        before this (only while ``EngineSession.report_applied`` is set)."""

    def delivered(self, host: SessionHost, effects: Effects) -> None:
        """Effects were carried out: their payloads are in the send queues."""

    def released(self, host: SessionHost, queue: SendQueue) -> None:
        """The stream of ``queue`` is gone (the session may be detached now)."""

    def configured(self, host: SessionHost) -> None:
        """The client changed the session's configuration (``host.session.config``)."""

    def ended(self, host: SessionHost) -> None:
        """The host stops: its session ended, or it was abandoned (shutdown, hand-over)."""

    def send_barrier(self, host: SessionHost) -> Callable[[], Awaitable[None]] | None:
        """What a stream's writer awaits before each event it sends; None: nothing."""
        return None


_Tap = TypeVar("_Tap", bound=HostTap)


class Taps:
    """The taps of one host, filed by the hooks each overrides: the host runs through a
    hook's tuple only when it is not empty (see the module)."""

    __slots__ = (
        "admitted",
        "all",
        "all_events",
        "applied",
        "configured",
        "delivered",
        "ended",
        "handed",
        "handled",
        "held_back",
        "released",
        "watchers",
    )

    def __init__(self) -> None:
        self.all: tuple[HostTap, ...] = ()  # in the order they came
        self.admitted: tuple[HostTap, ...] = ()
        self.handed: tuple[HostTap, ...] = ()
        self.handled: tuple[HostTap, ...] = ()
        self.applied: tuple[HostTap, ...] = ()
        self.delivered: tuple[HostTap, ...] = ()
        self.released: tuple[HostTap, ...] = ()
        self.configured: tuple[HostTap, ...] = ()
        self.ended: tuple[HostTap, ...] = ()
        self.all_events: tuple[HostTap, ...] = ()  # told of every engine event
        # Engine event kind -> the taps told of it (a tap may watch a kind for a while).
        self.watchers: dict[str, tuple[HostTap, ...]] = {}
        # Engine event kinds whose next event the host does not publish (the taps are told
        # of it): what an adopted session's replay makes again that the client was told
        # already (DurableTap.take_replay). Empty, as nearly always, it costs a truth test.
        self.held_back: set[str] = set()

    def add(self, tap: HostTap) -> None:
        """Registers an observer: from now on it is told of what it overrides a hook for."""
        self.all = (*self.all, tap)
        self._file()

    def remove(self, tap: HostTap) -> None:
        """Takes an observer off (idempotent)."""
        self.all = _without(self.all, tap)
        self.watchers = {
            kind: rest for kind, taps in self.watchers.items() if (rest := _without(taps, tap))
        }
        self._file()

    def watch(self, tap: HostTap, kind: str) -> None:
        """Tells ``tap`` of engine events of ``kind`` too, until :meth:`unwatch`."""
        if tap not in self.watchers.get(kind, ()):
            self.watchers[kind] = (*self.watchers.get(kind, ()), tap)

    def unwatch(self, tap: HostTap, kind: str) -> None:
        """Stops telling ``tap`` of ``kind``."""
        rest = _without(self.watchers.get(kind, ()), tap)
        if rest:
            self.watchers[kind] = rest
        else:
            self.watchers.pop(kind, None)

    def of(self, kind: type[_Tap]) -> _Tap | None:
        """The registered tap of class ``kind``, if one is."""
        return next((tap for tap in self.all if isinstance(tap, kind)), None)

    def send_barrier(self, host: SessionHost) -> Callable[[], Awaitable[None]] | None:
        """The first barrier a tap sets on a stream's writes (None: none)."""
        return next(filter(None, (tap.send_barrier(host) for tap in self.all)), None)

    def _file(self) -> None:
        filed = {hook: tuple(t for t in self.all if _overrides(t, hook)) for hook in HOOKS}
        self.admitted, self.handed = filed["admitted"], filed["handed"]
        self.handled, self.delivered = filed["handled"], filed["delivered"]
        self.applied = filed["applied"]
        self.released, self.configured = filed["released"], filed["configured"]
        self.ended = filed["ended"]
        self.all_events = tuple(tap for tap in filed["event"] if tap.events is None)
        for tap in filed["event"]:
            for kind in tap.events or ():
                self.watch(tap, kind)


def _overrides(tap: HostTap, hook: str) -> bool:
    return getattr(type(tap), hook) is not getattr(HostTap, hook)


def _without(taps: tuple[HostTap, ...], tap: HostTap) -> tuple[HostTap, ...]:
    return tuple(t for t in taps if t is not tap)


class TurnMetrics(HostTap):
    """The turn latencies the server measures itself: speech end to first audio, and those
    the engine reports in ``response_done``. Told only of the few events it reads; it asks for
    output audio only between the end of speech and the first audio after it."""

    events: ClassVar[frozenset[str] | None] = frozenset({"speech_stopped", "response_done"})

    def __init__(self) -> None:
        self._speech_ended_at = 0.0

    def event(self, host: SessionHost, kind: str | None, event: pb.ConverseResponse) -> None:
        if kind == "output_audio_delta":
            metrics.SPEECH_END_TO_AUDIO.observe(perf_counter() - self._speech_ended_at)
            host.taps.unwatch(self, "output_audio_delta")
        elif kind == "response_done":
            metrics.response_done(event)  # its latencies, into the histograms
        elif kind == "speech_stopped":
            self._speech_ended_at = perf_counter()
            host.taps.watch(self, "output_audio_delta")


class DurableTap(HostTap):
    """Durability: the store writes the session behind each change; the items it keeps are
    what an adopting peer gives its fresh engine session as the history, and the replay log
    (:mod:`omni_grpc.server.replay_log`) what it replays into it: the uncommitted input and
    the commands the engine had not applied, written in the same round as the number that
    covers them. The engine's ``applied`` markers (``report_applied``, set here) say when a
    command's effect is in what the store keeps anyway."""

    events: ClassVar[frozenset[str] | None] = frozenset(
        {
            "item_done",
            "response_created",
            "response_done",
            "item_deleted",
            "speech_started",
            *INPUT_TAKEN_EVENTS,
        }
    )

    def __init__(self, store: DurableStore, host: SessionHost) -> None:
        self.store = store
        self.replay = ReplayLog(host.session.admission.max_pending_input_bytes)
        self.items = ItemLog(self.replay)
        host.engine.report_applied = True
        self._kept_append = 0  # the append this command kept, until the engine took it
        self._handed_append = 0  # the last append the engine took
        # Server VAD after an adoption: the replay's last number, until which a speech_started
        # the fresh detector makes again is held back (told before the adoption); None: none.
        self._speech_told_through: int | None = None

    def admitted(
        self, host: SessionHost, generation: int, request: pb.ConverseRequest, effects: Effects
    ) -> None:
        for command in effects.engine:  # in the log before the round that writes its number
            self._keep(host.session, request, command)
        if not (effects.sends or effects.end_streams or effects.ended):
            self.store.mark(host.session, self.items)  # the command's number is the session's now

    def handed(self, host: SessionHost, command: EngineCommand) -> None:
        if type(command) is AppendAudio:
            self._handed_append = command.client_seq

    def handled(self, host: SessionHost, generation: int, request: pb.ConverseRequest) -> None:
        if self._kept_append and self._kept_append != self._handed_append:
            self.replay.refused(self._kept_append)  # its audio could not be decoded
        self._kept_append = 0

    def event(self, host: SessionHost, kind: str | None, event: pb.ConverseResponse) -> None:
        if kind in INPUT_TAKEN_EVENTS:
            self.replay.input_taken()
        elif kind == "speech_started":
            self.replay.speaking = True
            self._speech_told_through = None  # the one held back (take_replay), if any
        else:
            self.items.observe(kind, event)

    def applied(self, host: SessionHost, client_seq: int) -> None:
        self.replay.applied(client_seq)
        told = self._speech_told_through
        if told is not None and client_seq >= told:
            self._speech_told_through = None  # the replay is done: later speech is new
            host.taps.held_back.discard("speech_started")
        self.store.mark(host.session, self.items)

    def delivered(self, host: SessionHost, effects: Effects) -> None:
        if not effects.ended:
            self.store.mark(host.session, self.items)

    def send_barrier(self, host: SessionHost) -> Callable[[], Awaitable[None]] | None:
        if self.store.mode != "sync":
            return None
        store, session = self.store, host.session

        async def settled() -> None:
            await store.settled(session)

        return settled

    def take_replay(
        self,
        host: SessionHost,
        appends: list[bytes],
        commands: list[bytes],
        *,
        response_cut: bool = False,
    ) -> list[EngineCommand]:
        """An adopted session: the stored appends and commands as the engine commands to
        replay (``SessionHost.replay``), in the client's order, kept in this replay log until
        the fresh engine applies them. A ``cancel_response`` is dropped when the adoption cut
        the response it was for (``response_cut``): the cut ended it, and the fresh engine
        would refuse it. An update goes as the configuration in force (the stored state's).

        Server VAD: the client may have been told ``speech_started`` for the turn in progress
        (the stored journal's last word on speech); the fresh detector hearing the same audio
        says it again, and that one is held back, so no event is doubled and no audio lost.
        """
        session = host.session
        taken: list[EngineCommand] = []
        for request in replay_order(appends, commands):
            command = session.admission.readmit(request)
            if response_cut and type(command) is CancelResponse:
                continue
            if type(command) is UpdateSession:
                command = command._replace(config=session.config)
            self._keep(session, request, command)
            taken.append(command)
        self._kept_append = 0  # nothing here waits for a handled()
        if taken and speech_in_progress(session.journal):
            self._speech_told_through = taken[-1].client_seq
            host.taps.held_back.add("speech_started")
        self.store.mark(session, self.items)
        return taken

    def _keep(self, session: Session, request: pb.ConverseRequest, command: EngineCommand) -> None:
        if type(command) is not AppendAudio:
            self.replay.submitted(kind_of(command), request)
            return
        # Kept as it came, its format resolved as the core resolved it: replayed through a
        # fresh edge, it becomes the same engine input.
        append = request.append_input_audio
        if append.encoding != command.encoding or append.sample_rate_hz != command.rate_hz:
            resolved = pb.ConverseRequest()
            resolved.CopyFrom(request)
            resolved.append_input_audio.encoding = pb.AudioEncoding.ValueType(command.encoding)
            resolved.append_input_audio.sample_rate_hz = command.rate_hz
            request = resolved
        size = held_bytes(
            len(command.audio),
            command.encoding,
            command.rate_hz,
            command.native,
            command.video_frames,
        )
        self.replay.appended(request, size, vad=not client_commits(session.config))
        self._kept_append = command.client_seq


__all__ = ["HOOKS", "DurableTap", "HostTap", "Taps", "TurnMetrics"]
