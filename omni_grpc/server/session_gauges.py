"""Gauges of what every live server in the process holds, computed only when scraped.

:class:`SessionGauges` walks the live sessions of each server it watches when ``/metrics`` is
scraped: sessions attached and detached, journal bytes, events queued for the streams' writers,
the engine sessions' queues. Nothing is counted as sessions come and go. It lives apart from
the metric definitions (:mod:`omni_grpc.server.metrics`) because it reads the session hosts,
which bump those metrics: one file each, and no import cycle between them.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from omni_grpc.core import State
from omni_grpc.server.host import SessionHost


class _HasSessions(Protocol):
    def __iter__(self) -> Iterator[SessionHost]: ...


class SessionGauges(Collector):
    """What every live server in the process holds, read at scrape time: sessions attached and
    detached, journal bytes, events queued for writers, the engine sessions' queues."""

    def __init__(self) -> None:
        self._servers: weakref.WeakSet[_HasSessions] = weakref.WeakSet()

    def watch(self, sessions: _HasSessions) -> None:
        self._servers.add(sessions)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        counts = {State.ATTACHED: 0, State.DETACHED: 0}
        journal_bytes = queued_events = engine_commands = engine_events = 0
        for server in list(self._servers):
            for host in server:
                state = host.session.state
                if state in counts:
                    counts[state] += 1
                journal_bytes += host.session.journal.retained_bytes
                queued_events += host.queued_events
                commands, events = host.engine.queue_depths()
                engine_commands += commands
                engine_events += events
        for state, count in counts.items():
            name = state.name.lower()
            yield GaugeMetricFamily(f"omni_grpc_sessions_{name}", f"Sessions {name} now.", count)
        yield GaugeMetricFamily(
            "omni_grpc_journal_bytes", "Event bytes the sessions' journals hold.", journal_bytes
        )
        yield GaugeMetricFamily(
            "omni_grpc_engine_commands_queued",
            "Commands waiting in the engine sessions' mailboxes.",
            engine_commands,
        )
        yield GaugeMetricFamily(
            "omni_grpc_engine_events_queued",
            "Events the engine sessions produced that the server has not taken yet.",
            engine_events,
        )
        yield GaugeMetricFamily(
            "omni_grpc_send_queue_events",
            "Events queued for the streams' writers, all sessions together.",
            queued_events,
        )

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []  # computed at scrape time only


# The one collector of the process, registered when a server starts (see metrics.py).
SESSION_GAUGES = SessionGauges()


__all__ = ["SESSION_GAUGES", "SessionGauges"]
