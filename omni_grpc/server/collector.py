"""Python's cycle collector, set for a server whose calls come and go by the thousand.

A full collection walks every object the collector tracks, and the loop waits for it: every
session and stream on it. Under a key's churn of refused calls (``scripts/bench_tenants.py
--only silent-streams``: about 1400 refused ``Converse`` calls a second) the defaults made one
every second or so, 100-260 ms each, and each was a stall in every other tenant's round trip.
Two things made them so long and so frequent, and :func:`settle_collector` takes both:

* **What the server is made of.** Its modules, protobuf descriptors and the like, some 100,000
  objects, never die, yet every full collection walked them. Frozen once the server is up
  (``gc.freeze``), they are left out of every later collection.
* **Calls promoted as they wait.** With the default first threshold (700 allocations) the
  youngest generation is collected every few milliseconds at that rate and the middle one
  every few tens, so a call alive for a fifth of a second (a refused call waiting for its
  first write, ``status.refuse_call``) reaches the oldest generation before it ends; a full
  collection runs once the objects promoted so since the last one are a quarter of those that
  live there. With ``GENERATION_THRESHOLDS`` the young generations are collected about ten
  times less often, such calls end before they are promoted, and full collections are rare.

Measured on that benchmark (2 cores, load about 2): full collections of 100-260 ms about
every 0.8 s before; after, none during the attack's first 10 s, and the victim's round trip
p99 from 140-190 ms down to 15-20 ms (with the refusals' own cycles gone, ``refuse_call``).
"""

from __future__ import annotations

import gc

# The youngest generation's allocations, and the collections of each generation before the
# next one's (Python's defaults: 700, 10, 10).
GENERATION_THRESHOLDS = (5000, 20, 10)


def settle_collector() -> None:
    """Freezes what exists now (call it once the server is up) and sets the thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GENERATION_THRESHOLDS)


__all__ = ["GENERATION_THRESHOLDS", "settle_collector"]
