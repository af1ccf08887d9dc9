"""The service's Prometheus metrics: what the host and servicer observe as commands and events pass.

The sans-io core knows nothing of these; the server counts what goes into the core and what the
engine hands back. Every label value comes from a closed set (a contract ``oneof`` field name,
an ending reason, a resume outcome, an error code of the server's own), never a session id, so
the number of series stays bounded. What every command and engine event bumps (commands and
events by kind, the host's time per append) is counted in plain ints and read at scrape time
(:mod:`omni_grpc.server.hot_metrics`); the rarer counters here are prometheus-client's own. The
gauges of attached and detached sessions are computed only when ``/metrics`` is scraped, by
:class:`SessionGauges` walking the live sessions.

The metrics live in prometheus-client's process-wide registry, as is usual: the bridge's
``/metrics`` (and ``--metrics-port``) expose them with the bridge's own in one scrape.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from omni_grpc.core import Session, State
from omni_grpc.server.hot_metrics import HotCounts
from omni_grpc.wire import pb

if TYPE_CHECKING:
    from omni_grpc.server.host import SessionHost

# Latency buckets in seconds, from a fast loopback turn to a slow CPU speech loop.
LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
RTF_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)

SESSIONS_OPENED = Counter("omni_grpc_sessions_opened", "Sessions opened.")
SESSIONS_ENDED = Counter(
    "omni_grpc_sessions_ended",
    "Sessions ended, by reason: closed, or expired for disconnect_grace, idle_timeout or "
    "engine_failure.",
    ["reason"],
)
RESUMES = Counter(
    "omni_grpc_resumes",
    "Resume attempts by outcome: resumed, refused, gap (resync_required), ended.",
    ["outcome"],
)
STREAM_REFUSALS = Counter(
    "omni_grpc_stream_refusals",
    "Streams refused at their first message (a resume, or any other stream), by error code.",
    ["first", "code"],
)
COMMAND_REFUSALS = Counter(
    "omni_grpc_command_refusals",
    "Commands refused in band with an error event, by error code (rate_limit_exceeded, ...).",
    ["code"],
)
JOURNAL_OVERFLOWS = Counter(
    "omni_grpc_journal_overflows",
    "Sessions whose journal overflowed (a resume of them needs a resync).",
)
TTFT = Histogram(
    "omni_grpc_response_first_text_seconds",
    "Time from the turn's commit to the first text of its response (TTFT).",
    buckets=LATENCY_BUCKETS_S,
)
TTFP = Histogram(
    "omni_grpc_response_first_audio_seconds",
    "Time from the turn's commit to the first audio of its response (TTFP).",
    buckets=LATENCY_BUCKETS_S,
)
RESPONSE_TOTAL = Histogram(
    "omni_grpc_response_total_seconds",
    "Time from the turn's commit to the end of its response.",
    buckets=LATENCY_BUCKETS_S,
)
RTF = Histogram(
    "omni_grpc_response_real_time_factor",
    "Generation time divided by output audio length, per response.",
    buckets=RTF_BUCKETS,
)
SPEECH_END_TO_AUDIO = Histogram(
    "omni_grpc_speech_end_to_first_audio_seconds",
    "From the engine's speech_stopped (server VAD) to the first audio delta after it, on the "
    "server's clock.",
    buckets=LATENCY_BUCKETS_S,
)
# Commands and engine events by kind, the host's time per append: bumped as plain ints.
HOT_COUNTS = HotCounts()
REGISTRY.register(HOT_COUNTS)
ENDING_REASONS = ("closed", "disconnect_grace", "idle_timeout", "engine_failure")
_ENDED = {reason: SESSIONS_ENDED.labels(reason) for reason in ENDING_REASONS}


def session_ended(session: Session, expiry_reason: str) -> None:
    """Counts a session's end: closed, or expired for ``expiry_reason`` (of ENDING_REASONS)."""
    _ENDED["closed" if session.state is State.CLOSED else expiry_reason].inc()


def response_done(event: pb.ConverseResponse) -> None:
    """Feeds a ``response_done``'s latencies to the histograms (its count is a hot count)."""
    latency = event.response_done.response.latency
    # Zero means "did not happen" (a cancelled response, a text-only answer): not observed.
    if latency.first_text_ms > 0:
        TTFT.observe(latency.first_text_ms / 1000)
    if latency.first_audio_ms > 0:
        TTFP.observe(latency.first_audio_ms / 1000)
    if latency.total_ms > 0:
        RESPONSE_TOTAL.observe(latency.total_ms / 1000)
    if latency.real_time_factor > 0:
        RTF.observe(latency.real_time_factor)


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


SESSION_GAUGES = SessionGauges()
REGISTRY.register(SESSION_GAUGES)

__all__ = [
    "COMMAND_REFUSALS",
    "ENDING_REASONS",
    "HOT_COUNTS",
    "JOURNAL_OVERFLOWS",
    "RESUMES",
    "SESSIONS_OPENED",
    "SESSION_GAUGES",
    "SPEECH_END_TO_AUDIO",
    "STREAM_REFUSALS",
    "response_done",
    "session_ended",
]
