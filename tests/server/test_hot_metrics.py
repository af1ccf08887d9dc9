"""The hot path's metrics, counted as plain ints and exposed at scrape time.

Two checks: the collector's exposition is sample for sample what prometheus-client's own
``Counter`` and ``Histogram`` of the same names, labels and buckets give for the same
observations (so dashboards and queries cannot tell them apart); and through a real server and
``/metrics``, the commands, engine events and append timings of a stream are counted.
"""

from __future__ import annotations

import grpc
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from omni_grpc.gen.omni.duplex.v1 import duplex_pb2_grpc
from omni_grpc.server.host import APPEND_TIMING_EVERY
from omni_grpc.server.hot_metrics import CHUNK_BUCKETS_S, HotCounts
from omni_grpc.wire import pb
from tests.server.streams import open_stream, pcm16, read
from tests.server.test_metrics import clock, metrics_port, scrape, server_clock, value
from tests.serving import FakeClock

__all__ = ["clock", "metrics_port", "server_clock"]  # fixtures, shared with the metrics tests

# On a bound, just past one, between two, beyond the last: every kind of bucket placement.
TIMINGS_S = (0.00005, 0.00006, 0.0003, 0.0009, 0.001, 0.3, 0.000001)


def _families(registry: CollectorRegistry) -> dict[str, tuple[str, list[tuple[str, dict, float]]]]:
    """Each family's type and samples, without the ``_created`` stamps (times of creation)."""
    text = generate_latest(registry).decode()
    return {
        family.name: (
            family.type,
            [
                (sample.name, sample.labels, sample.value)
                for sample in family.samples
                if not sample.name.endswith("_created")
            ],
        )
        for family in text_string_to_metric_families(text)
    }


def test_the_exposition_is_that_of_prometheus_clients_own_types() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counts = HotCounts()
    ours.register(counts)
    commands = Counter(
        "omni_grpc_commands", "Commands received, by kind.", ["kind"], registry=theirs
    )
    events = Counter(
        "omni_grpc_engine_events",
        "Events the engines produced, by kind.",
        ["kind"],
        registry=theirs,
    )
    appends = Histogram(
        "omni_grpc_append_handling_seconds",
        "The host's time handling one append_input_audio command (core, conversion, engine "
        "hand-off).",
        buckets=CHUNK_BUCKETS_S,
        registry=theirs,
    )
    for kind in counts.commands:
        if kind is not None:
            commands.labels(kind)  # every kind is there from the start, at 0
    for kind in counts.events:
        if kind is not None:
            events.labels(kind)
    for kind, times in (("append_input_audio", 5), ("ack_events", 2), (None, 1)):
        for _ in range(times):
            counts.commands[kind] += 1
            if kind is not None:
                commands.labels(kind).inc()
    for _ in range(3):
        counts.events["output_audio_delta"] += 1
        events.labels("output_audio_delta").inc()
    for seconds in TIMINGS_S:
        counts.append_handled(seconds)
        appends.observe(seconds)

    assert _families(ours) == _families(theirs)
    scraped = _families(ours)
    assert ("omni_grpc_commands_total", {"kind": "append_input_audio"}, 5.0) in scraped[
        "omni_grpc_commands"
    ][1]
    buckets = {
        sample[1]["le"]: sample[2]
        for sample in scraped["omni_grpc_append_handling_seconds"][1]
        if sample[0].endswith("_bucket")
    }
    assert buckets["5e-05"] == 2 and buckets["0.001"] == 6 and buckets["+Inf"] == len(TIMINGS_S)


def test_a_second_collector_of_the_same_names_is_refused() -> None:
    registry = CollectorRegistry()
    registry.register(HotCounts())
    with pytest.raises(ValueError, match="Duplicated"):
        registry.register(HotCounts())


async def test_a_streams_commands_events_and_append_times_are_scraped(
    server: object, clock: FakeClock, metrics_port: int
) -> None:
    before = await scrape(metrics_port)
    async with grpc.aio.insecure_channel(server.target) as channel:  # type: ignore[attr-defined]
        stub = duplex_pb2_grpc.DuplexServiceStub(channel)
        call, _ = await open_stream(stub)
        appends = APPEND_TIMING_EVERY + 2  # the session's first is timed, and the 17th
        for seq in range(1, appends + 1):
            audio = pb.AppendInputAudio(audio=pcm16(20))
            await call.write(pb.ConverseRequest(client_seq=seq, append_input_audio=audio))
        await call.write(pb.ConverseRequest(heartbeat=pb.Heartbeat()))
        assert (await read(call)).WhichOneof("event") == "heartbeat_ack"
        after = await scrape(metrics_port)
        call.cancel()

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("omni_grpc_commands_total", kind="append_input_audio") == appends
    assert grew("omni_grpc_commands_total", kind="heartbeat") == 1
    assert grew("omni_grpc_append_handling_seconds_count") == 2  # one append in 16, sampled
    assert grew("omni_grpc_append_handling_seconds_bucket", le="+Inf") == 2
    assert 0 < grew("omni_grpc_append_handling_seconds_sum") < 1
