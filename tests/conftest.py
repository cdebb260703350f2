"""Hypothesis profiles: ``ci`` (default, fast) and ``thorough`` (HYPOTHESIS_PROFILE=thorough)."""

import os

# There is no GPU here: Triton kernels run in Triton's CPU interpreter. Triton reads this when it
# is first imported (its own library functions are jitted then), so it is set for the whole
# session, before any test module imports triton.
os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
