"""The metrics of every command and engine event, counted in plain ints and read at scrape time.

A prometheus-client ``Counter.inc()`` takes a lock and goes through a value object: about a
microsecond each, and the hot path made four per appended chunk. Here the host bumps a plain
``int`` in a dict (``counts.commands[kind] += 1``), all on the event loop's thread, and
:class:`HotCounts` turns them into the same families when ``/metrics`` is scraped: the counters
``omni_grpc_commands`` and ``omni_grpc_engine_events`` by ``kind`` (every kind of the contract's
``oneof``, present from the start at 0, as their labelled children were) and the histogram
``omni_grpc_append_handling_seconds``. Names, labels, types and buckets are those the dashboards
and docs/operations.md name.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable

from google.protobuf.message import Message
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from omni_grpc.wire import pb

# Host time per append command: tens of microseconds when all is well.
CHUNK_BUCKETS_S = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25)


def _kinds(message: type[Message], oneof: str) -> dict[str | None, int]:
    """A count per field of the contract's ``oneof``, and one for a message with none set (not
    exposed: the core refuses it), so the hot path bumps without a branch."""
    fields = message.DESCRIPTOR.oneofs_by_name[oneof].fields
    return {None: 0, **{field.name: 0 for field in fields}}


class HotCounts(Collector):
    """Commands and engine events by kind, and the host's time per append, as plain numbers."""

    def __init__(self) -> None:
        self.commands = _kinds(pb.ConverseRequest, "command")
        self.events = _kinds(pb.ConverseResponse, "event")
        # Appends per bucket of CHUNK_BUCKETS_S (not cumulative), the last one past every bound.
        self.append_buckets = [0] * (len(CHUNK_BUCKETS_S) + 1)
        self.append_sum_s = 0.0
        self._created = time.time()

    def append_handled(self, seconds: float) -> None:
        """Observes the host's time on one append (Prometheus buckets hold values <= bound)."""
        self.append_buckets[bisect_left(CHUNK_BUCKETS_S, seconds)] += 1
        self.append_sum_s += seconds

    def collect(self) -> Iterable[Metric]:
        yield self._counter("omni_grpc_commands", "Commands received, by kind.", self.commands)
        yield self._counter(
            "omni_grpc_engine_events", "Events the engines produced, by kind.", self.events
        )
        histogram = HistogramMetricFamily(
            "omni_grpc_append_handling_seconds",
            "The host's time handling one append_input_audio command (core, conversion, "
            "engine hand-off).",
        )
        cumulative, buckets = 0, []
        for bound, count in zip((*CHUNK_BUCKETS_S, float("inf")), self.append_buckets, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), float(cumulative)))
        histogram.add_metric([], buckets, self.append_sum_s)
        # As prometheus-client's own Histogram gives it (add_metric takes no creation time).
        histogram.samples.append(
            Sample("omni_grpc_append_handling_seconds_created", {}, self._created)
        )
        yield histogram

    def _counter(self, name: str, doc: str, counts: dict[str | None, int]) -> Metric:
        family = CounterMetricFamily(name, doc, labels=["kind"])
        for kind, count in list(counts.items()):
            if kind is not None:
                family.add_metric([kind], count, created=self._created)
        return family

    def describe(self) -> Iterable[Metric]:
        # Described by name, so the registry refuses another collector of the same names.
        yield CounterMetricFamily("omni_grpc_commands", "", labels=["kind"])
        yield CounterMetricFamily("omni_grpc_engine_events", "", labels=["kind"])
        yield HistogramMetricFamily("omni_grpc_append_handling_seconds", "")


__all__ = ["CHUNK_BUCKETS_S", "HotCounts"]
