"""Hypothesis settings for the core's stateful tests.

The profile is applied to the state machines explicitly (``settings.get_profile``) rather
than loaded globally, so it does not change hypothesis tests elsewhere in the suite. 500
runs of 40 steps (20,000 steps) keep the whole core suite under half a minute on two cores;
``OMNI_CORE_EXAMPLES=20000 pytest tests/core/test_properties.py`` digs deeper when wanted,
and CI (``CI=true``) runs 3,000.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

CORE_STATEFUL_PROFILE = "omni-core-stateful"

settings.register_profile(
    CORE_STATEFUL_PROFILE,
    # CI runs 3,000 (about a minute and a half); a developer's default stays quick.
    max_examples=int(
        os.environ.get("OMNI_CORE_EXAMPLES", "3000" if os.environ.get("CI") == "true" else "500")
    ),
    stateful_step_count=40,
    # The steps are fast but uneven (a resume replays a journal); wall-clock deadlines would
    # only make a loaded CI machine flaky.
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
