"""Hypothesis profiles for the test suite.

``ci``:  derandomized (the same examples on every run, so a CI failure reproduces),
         no deadline (timings on shared runners are noise), failing examples printed
         with a reproduction blob (``@reproduce_failure``), no example database.
``dev``: random examples (a fresh search on each run; failures are replayed from the
         local ``.hypothesis`` database), no deadline.

The profile is ``$HYPOTHESIS_PROFILE`` if set, else ``ci`` when ``$CI`` is set (as CI
services do), else ``dev``. Settings a test gives itself (``@settings(...)``) take
precedence over the profile for the options they name.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    database=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE")
                      or ("ci" if "CI" in os.environ else "dev"))
