"""Test session setup: Triton's CPU interpreter (with its bf16 ``tl.dot`` shim) and the Hypothesis
profiles ``ci`` (default, fast) and ``thorough`` (HYPOTHESIS_PROFILE=thorough)."""

import os

from hypothesis import HealthCheck, settings

# There is no GPU here: Triton kernels run in Triton's CPU interpreter. Triton reads this when it
# is first imported (its own library functions are jitted then), so it is set for the whole
# session, before any test module imports triton.
os.environ.setdefault("TRITON_INTERPRET", "1")

# bf16 tl.dot is garbage in the interpreter without this shim (see its docstring); it touches
# only the interpreter of this process, never a kernel's source or a lesson's environment.
import triton_shim

triton_shim.install()

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
