"""The cycle collector as a server sets it once it is up (omni_grpc.server.collector): what
exists then is frozen out of later collections, and the young generations are collected less
often. Run in a process of its own, as freezing is for the rest of a process's life."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from omni_grpc.server.collector import GENERATION_THRESHOLDS

SETTLE = """
import gc, json
from omni_grpc.server.collector import settle_collector
before = gc.get_freeze_count()
settle_collector()
print(json.dumps([before, gc.get_freeze_count(), gc.get_threshold()]))
"""


@pytest.mark.subprocess
def test_settling_freezes_what_exists_and_sets_the_thresholds() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", SETTLE], capture_output=True, text=True, check=True, timeout=120
    )
    before, frozen, thresholds = json.loads(ran.stdout)
    assert before == 0
    assert frozen > 0
    assert tuple(thresholds) == GENERATION_THRESHOLDS
    assert GENERATION_THRESHOLDS[0] > 700  # the young generation less often than by default
