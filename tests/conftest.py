"""Shared pytest configuration."""

import os

from hypothesis import settings

# Property tests are deterministic (same examples every run, no example database) and have no per-example
# deadline, so CI on a shared 2-core machine neither flakes nor times out. HYPOTHESIS_PROFILE=explore
# draws fresh random examples locally.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=100)
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
