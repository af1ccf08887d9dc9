"""The service's Prometheus metrics: what the host and servicer observe as commands and events pass.

The sans-io core knows nothing of these; the server counts what goes into the core and what the
engine hands back. Every label value comes from a closed set (a contract ``oneof`` field name,
an ending reason, a resume outcome, an error code of the server's own) or is the hashed label of
one of the server's own API keys (``none`` without one), never a session id or a key, so the
number of series stays bounded. What every command and engine event bumps (commands and
events by kind, the host's time per append) is counted in plain ints and read at scrape time
(:mod:`omni_grpc.server.hot_metrics`); the rarer counters here are prometheus-client's own. The
gauges of attached and detached sessions are computed only when ``/metrics`` is scraped, by
:class:`~omni_grpc.server.session_gauges.SessionGauges` walking the live sessions; it and the
hot counts are registered when a server starts (:func:`register_collectors`), not at import.

The metrics live in prometheus-client's process-wide registry, as is usual: the bridge's
``/metrics`` (and ``--metrics-port``) expose them with the bridge's own in one scrape.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.registry import Collector

from omni_grpc.core import Session, State
from omni_grpc.server.hot_metrics import HotCounts
from omni_grpc.wire import pb

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
KEY_REFUSALS = Counter(
    "omni_grpc_key_refusals",
    "Calls, streams, opens and resumes refused, by API key (a hash: omni_grpc.wire.keys."
    "key_label) and reason (an error code, or the bound: streams, streams_per_key, "
    "streams_per_peer, keyless_calls).",
    ["key", "reason"],
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
# Commands and engine events by kind, the host's time per append: bumped as plain ints, read
# by the collector registered when a server starts (register_collectors).
HOT_COUNTS = HotCounts()
ENDING_REASONS = ("closed", "disconnect_grace", "idle_timeout", "engine_failure")
_ENDED = {reason: SESSIONS_ENDED.labels(reason) for reason in ENDING_REASONS}


def register_collectors(*collectors: Collector) -> None:
    """Registers the scrape-time collectors of a server that starts (the hot counts, and
    ``collectors``), once per process: a second server in the process shares them."""
    for collector in (HOT_COUNTS, *collectors):
        if collector not in _REGISTERED:
            REGISTRY.register(collector)
            _REGISTERED.append(collector)


_REGISTERED: list[Collector] = []


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


__all__ = [
    "COMMAND_REFUSALS",
    "ENDING_REASONS",
    "HOT_COUNTS",
    "JOURNAL_OVERFLOWS",
    "KEY_REFUSALS",
    "RESUMES",
    "SESSIONS_OPENED",
    "SPEECH_END_TO_AUDIO",
    "STREAM_REFUSALS",
    "register_collectors",
    "response_done",
    "session_ended",
]
