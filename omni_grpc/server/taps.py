"""Taps: the one way to observe a session host, and the observers the server registers.

A :class:`HostTap` is told what the host does: a command the core decided on (``admitted``,
with the effects the core returned: read ``session.last_skip`` and ``session.last_refusal``
for what became of it), each command as the engine took it (``handed``: an append's audio as
the engine heard it, a commit's resampler tail as an append of its own), the command's end
(``handled``), each engine event before it is published (``event``), each carrying out of
effects (``delivered``), a stream gone (``released``), the configuration changed by the client
(``configured``), and the end of the host (``ended``: the session ended, or the host was
abandoned at a shutdown or a hand-over). The rules held here:

* **Registered, never wrapped.** Observers register with :meth:`SessionHost.add_tap` and come
  off with :meth:`SessionHost.remove_tap`; nothing replaces a method of the host.
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
from typing import ClassVar, Protocol

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

    def watch(self, tap: HostTap, kind: str) -> None: ...

    def unwatch(self, tap: HostTap, kind: str) -> None: ...

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
            host.unwatch(self, "output_audio_delta")
        elif kind == "response_done":
            metrics.response_done(event)  # its latencies, into the histograms
        elif kind == "speech_stopped":
            self._speech_ended_at = perf_counter()
            host.watch(self, "output_audio_delta")


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


__all__ = ["HOOKS", "DurableTap", "HostTap", "TurnMetrics"]
