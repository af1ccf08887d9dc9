#!/usr/bin/env python3
"""Benchmark: our gRPC service against a raw grpc.aio echo (see omni_grpc/bench/service.py).

scripts/bench_grpc.py            # full run, about 2 to 4 minutes
scripts/bench_grpc.py --quick    # a smoke run of a few seconds
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from omni_grpc.bench.service import main

if __name__ == "__main__":
    sys.exit(main())
