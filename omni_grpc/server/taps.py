"""Taps: the one way to observe a session host, and the observers the server registers.

A :class:`HostTap` is told what the host does: a command the core decided on (``admitted``,
with the effects the core returned: read ``session.last_skip`` and ``session.last_refusal``
for what became of it), each command as the engine took it (``handed``: an append's audio as
the engine heard it, a commit's resampler tail as an append of its own), the command's end
(``handled``), each engine event before it is published (``event``), each carrying out of
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
from omni_grpc.core.commands import EngineCommand
from omni_grpc.engine.base import EngineSession
from omni_grpc.server import metrics
from omni_grpc.server.durable import DurableStore, ItemLog
from omni_grpc.server.send_queue import SendQueue
from omni_grpc.wire import pb

# The hooks a tap may override, each filed apart on the host (see SessionHost.add_tap).
HOOKS = (
    "admitted",
    "handed",
    "handled",
    "event",
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
        "configured",
        "delivered",
        "ended",
        "handed",
        "handled",
        "released",
        "watchers",
    )

    def __init__(self) -> None:
        self.all: tuple[HostTap, ...] = ()  # in the order they came
        self.admitted: tuple[HostTap, ...] = ()
        self.handed: tuple[HostTap, ...] = ()
        self.handled: tuple[HostTap, ...] = ()
        self.delivered: tuple[HostTap, ...] = ()
        self.released: tuple[HostTap, ...] = ()
        self.configured: tuple[HostTap, ...] = ()
        self.ended: tuple[HostTap, ...] = ()
        self.all_events: tuple[HostTap, ...] = ()  # told of every engine event
        # Engine event kind -> the taps told of it (a tap may watch a kind for a while).
        self.watchers: dict[str, tuple[HostTap, ...]] = {}

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
    """Durability: the store writes the session behind each change, and the items it keeps
    are what an adopting peer gives its fresh engine session as the history."""

    events: ClassVar[frozenset[str] | None] = frozenset(
        {"item_done", "response_done", "item_deleted"}
    )

    def __init__(self, store: DurableStore) -> None:
        self.store = store
        self.items = ItemLog()

    def admitted(
        self, host: SessionHost, generation: int, request: pb.ConverseRequest, effects: Effects
    ) -> None:
        if not (effects.sends or effects.end_streams or effects.ended):
            self.store.mark(host.session, self.items)  # the command's number is the session's now

    def event(self, host: SessionHost, kind: str | None, event: pb.ConverseResponse) -> None:
        self.items.observe(kind, event)

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


__all__ = ["HOOKS", "DurableTap", "HostTap", "Taps", "TurnMetrics"]
