"""Benchmarks of the transports: each runs the real thing next to a raw baseline, in one run.

:mod:`omni_grpc.bench.harness` is what every transport benchmark shares (server child processes,
CPU pinning, paced load, the table), :mod:`omni_grpc.bench.measure` runs one (interleaved, with
repeated trials and the capacity searches of :mod:`omni_grpc.bench.search`), and
:mod:`omni_grpc.bench.meter` counts the mirror engine's own CPU inside a server. The sessions
that load a server are :mod:`omni_grpc.bench.grpc_load` (gRPC streams) and
:mod:`omni_grpc.bench.ws_load` (Realtime websockets).
:mod:`omni_grpc.bench.service` is the gRPC service against a raw grpc.aio echo (``omni-grpc
bench``, ``scripts/bench_grpc.py``). The websocket bridge's benchmark is
``scripts/bench_bridge.py``: it needs the bridge, which nothing under ``omni_grpc`` but the CLI
imports.
"""
